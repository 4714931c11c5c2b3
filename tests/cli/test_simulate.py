from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhouse.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["simulate", "--model", "Llama-3.1-8B", "--replicas", "2"]


def test_policies_side_by_side_with_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.json"
    rc = main(
        [
            *SMALL,
            "--workload",
            "utility",
            "-W",
            "rate_per_s=4",
            "--duration",
            "20",
            "--policy",
            "round_robin,cache_aware",
            "--slo",
            "ttft_ms=500,itl_ms=60",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if "round_robin" in line)
    assert header.split() == ["round_robin", "cache_aware"]
    assert "prefix cache hit rate" in printed
    data = json.loads(out.read_text())
    assert list(data["policies"]) == ["round_robin", "cache_aware"]
    summary = data["policies"]["cache_aware"]
    for key in (
        "completed",
        "request_throughput",
        "output_throughput",
        "mean_ttft_ms",
        "p99_itl_ms",
        "median_e2el_ms",
        "prefix_cache_hit_rate",
        "theoretical_hit_rate",
        "replica_load_max_over_mean",
        "num_preemptions",
        "goodput",
        "pools",
    ):
        assert key in summary
    assert summary["completed"] > 50
    assert data["slo"] == {"ttft_ms": 500.0, "itl_ms": 60.0}


def test_a_stack_file_and_its_own_policies(capsys: pytest.CaptureFixture[str]) -> None:
    stack = ROOT / "examples" / "crm-copilot" / "stack.yaml"
    rc = main(
        [
            "simulate",
            "--stack",
            str(stack),
            "--workload",
            "agent",
            "-W",
            "sessions=4",
            "--duration",
            "15",
        ]
    )
    assert rc == 0
    assert "cache_aware" in capsys.readouterr().out


def test_trace_replay_of_the_mooncake_sample(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    trace = ROOT / "data" / "mooncake_conversation_sample.jsonl"
    rc = main(
        [
            *SMALL,
            "--workload",
            f"trace:{trace}",
            "--duration",
            "10",
            "--rate-scale",
            "0.5",
            "--policy",
            "cache_aware",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    summary = json.loads(out.read_text())["policies"]["cache_aware"]
    assert summary["completed"] + summary["failed"] > 10


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate"], "give --stack STACK.yaml, or --model M"),
        ([*SMALL, "--workload", "chat"], "workload 'chat' is unknown"),
        ([*SMALL, "--policy", "random"], "--policy 'random' is unknown"),
        ([*SMALL, "--slo", "ttft=5"], "SLO 'ttft' is unknown"),
        ([*SMALL, "--slo", "ttft_ms"], "use KEY=VALUE"),
        ([*SMALL, "-W", "sesions=3"], "has no parameter 'sesions'"),
        (
            [*SMALL, "--workload", "trace:/nonexistent.jsonl"],
            "cannot read trace /nonexistent.jsonl",
        ),
        ([*SMALL, "--down", "gpu=1"], "'gpu' is not a pool"),
        ([*SMALL, "--duration", "0"], "duration must be positive"),
    ],
)
def test_user_errors_name_the_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
