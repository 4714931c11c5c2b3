from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from inhouse.cli.main import main
from inhouse.cli.simulate import refuse_a_run_too_large
from inhouse.errors import SpecError
from inhouse.fleet import MAX_SIMULATED_REQUESTS
from inhouse.fleet.simulator import PROJECT_EVERY
from inhouse.workload import make_workload, workload_params
from inhouse.workload.volume import MAX_CLIENTS, MAX_LENGTH_TOKENS, MAX_PREFIX_GROUPS

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


def _utility_rate() -> float:
    return float(str(workload_params("utility")["rate_per_s"]))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--duration", "1e12"], lambda rate: rate * 1e12),
        (["--rate-scale", "1e9"], lambda rate: rate * 1e9 * 300),
    ],
)
def test_an_open_loop_past_the_request_limit_is_refused_with_its_estimate(
    flags: list[str], expected: Callable[[float], float], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SMALL, "--workload", "utility", *flags]) == 2
    err = capsys.readouterr().err
    assert f"about {expected(_utility_rate()):,.0f} requests" in err
    assert f"more than the {MAX_SIMULATED_REQUESTS:,} a run may" in err
    assert flags[0] in err and "Traceback" not in err


def test_the_request_limit_itself_is_allowed() -> None:
    rate = _utility_rate()
    workload = make_workload("utility")
    refuse_a_run_too_large(workload, MAX_SIMULATED_REQUESTS / rate, 1.0)
    with pytest.raises(SpecError, match="--duration"):
        refuse_a_run_too_large(workload, MAX_SIMULATED_REQUESTS / rate * 1.001, 1.0)


def test_agent_sessions_scaled_past_the_client_limit_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sessions = int(str(workload_params("agent")["sessions"]))
    assert main([*SMALL, "--workload", "agent", "--rate-scale", "1e9"]) == 2
    err = capsys.readouterr().err
    assert f"is {round(sessions * 1e9):,} clients, more than the {MAX_CLIENTS:,}" in err
    assert "--rate-scale" in err


def test_a_closed_loop_headed_past_the_request_limit_stops_early(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*SMALL, "--workload", "fixed", "--duration", "1e12"]) == 2
    err = capsys.readouterr().err
    assert f"the run sent {PROJECT_EVERY:,} requests in its first" in err
    assert "--duration" in err and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--duration", "--rate-scale"])
@pytest.mark.parametrize("value", ["inf", "nan", "-1"])
def test_a_non_finite_duration_or_scale_is_refused(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SMALL, "--workload", "utility", flag, value]) == 2
    assert "must be positive and finite" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("param", "message"),
    [
        (f"num_tasks={MAX_PREFIX_GROUPS * 10_000}", f"more than {MAX_PREFIX_GROUPS:,}"),
        (f"document={MAX_LENGTH_TOKENS * 8}:{MAX_LENGTH_TOKENS * 64}", "lengths past"),
    ],
)
def test_workload_parameters_that_build_without_bound_are_refused(
    param: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SMALL, "--workload", "utility", "-W", param, "--duration", "2"]) == 2
    err = capsys.readouterr().err
    assert message in err and param.split("=")[0] in err
