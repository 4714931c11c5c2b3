import json
import sys
from pathlib import Path

import pytest
import yaml

from inhouse.cli.main import main
from inhouse.plan.memo_format import METRIC_NAMES
from inhouse.plan.verify import METRIC_KEYS
from inhouse.spec.load import load_stack

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plan"))
from plan_helpers import small_requirements

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "requirements.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_plan_writes_stack_json_and_memo_and_the_stack_simulates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["plan", str(write(tmp_path, small_requirements())), "--out", str(out)]) == 0
    assert "small:" in capsys.readouterr().out
    stack = load_stack(out / "stack.yaml")
    assert stack.pools[0].served_model_name == "chat"
    report = json.loads((out / "plan.json").read_text())
    for key in ("pools", "slo_check", "degraded", "cost", "sensitivity", "assumptions"):
        assert key in report
    assert {"usd_per_hour", "usd_per_million_tokens", "breakeven_months"} <= set(report["cost"])
    assert {s["name"] for s in report["sensitivity"]} == {
        "prompt_p95_1.7x",
        "output_p95_1.7x",
        "prefix_hit_halved",
        "burstiness_2x",
        "traffic_2x",
        "tp_scaling_20pct_worse",
        "no_fp8",
    }
    assert report["slo_check"]["1x"]["workloads"]["chat"]["pass"] is True
    memo = (out / "sizing-memo.md").read_text()
    for section in (
        "Workload characterization",
        "Hardware bill",
        "SLO commitments",
        "Capacity plan",
        "Cost sheet",
        "What would invalidate the plan",
    ):
        assert section in memo
    for png in ("latency.png", "cost.png", "sensitivity.png", "memory.png"):
        assert (out / png).stat().st_size > 0
        assert f"]({png})" in memo
    # The memo's numbers come from plan.json: the all-in $/h, for one.
    assert f"${report['cost']['usd_per_hour']:,.2f}/h" in memo
    # Each p95 the 1x check judges carries its interval and whether its pass is within the
    # simulator's noise (the interval past the target); the memo's 1x cell shows both.
    one = report["slo_check"]["1x"]
    slo_table = memo.split("## 4. ")[1].split("## 5. ")[0]
    flags = []
    for name, row in one["workloads"].items():
        for metric, item in row["metrics"].items():
            low, high = item["p95_interval_ms"]
            assert [low, high] == row["p95_interval_ms"][METRIC_KEYS[metric]]
            assert item["marginal"] is (item["pass"] and high > item["target_ms"])
            flags.append(item["marginal"])
            start = f"| {name} | {METRIC_NAMES[metric]} |"
            (line,) = [x for x in slo_table.splitlines() if x.startswith(start)]
            assert f"{item['p95_ms']:,.0f} ms ({low:,.0f}–{high:,.0f} ms) ok" in line
            assert ("less than the simulator's noise" in line) is item["marginal"]
    assert flags and one["marginal"] is any(flags)

    # ... and the stack runs under `inhouse simulate`, with the command plan.json gives.
    command = report["reproduce"]["simulate"]["chat"].split()
    assert command[:2] == ["inhouse", "simulate"]
    index = command.index("--duration")
    command[index + 1] = "10"
    assert main([*command[1:], "--json", str(tmp_path / "sim.json")]) == 0
    summary = json.loads((tmp_path / "sim.json").read_text())
    assert json.dumps(summary).count('"completed"') >= 1


def test_infeasible_requirement_exits_non_zero_naming_the_binding_constraint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = small_requirements(verify_top=0)
    data["workloads"][0].update(
        kind="longctx",
        prompt_tokens={"p50": 20000, "p95": 24000},
        max_prompt_tokens=30000,
        slo={"ttft_p95_ms": 50},
    )
    data["hardware"] = [
        {
            "gpu": "h100_sxm",
            "gpus_per_node": 1,
            "max_nodes": 1,
            "pricing": "hourly",
            "usd_per_gpu_hour": 3,
        }
    ]
    out = tmp_path / "out"
    assert main(["plan", str(write(tmp_path, data)), "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("inhouse plan: infeasible:")
    assert "binding constraint" in err and "p95 ttft" in err
    assert not out.exists()


def test_bad_requirements_name_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = small_requirements()
    data["workloads"][0]["slo"] = {"ttft_p95_ms": -1}
    assert main(["plan", str(write(tmp_path, data)), "--out", str(tmp_path / "o")]) == 2
    assert "workloads.0.slo.ttft_p95_ms" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("name", ["crm-copilot", "code-assistant"])
def test_examples_plan_and_their_stacks_load(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    requirements = ROOT / "examples" / name / "requirements.yaml"
    assert main(["plan", str(requirements), "--out", str(out)]) == 0
    stack = load_stack(out / "stack.yaml")
    report = json.loads((out / "plan.json").read_text())
    assert report["slo_check"]["1x"]["workloads"]
    assert all(w["pass"] for w in report["slo_check"]["1x"]["workloads"].values())
    assert stack.name == name


def test_hostile_requirements_files_exit_2_with_a_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each was a traceback (UnicodeDecodeError) or a silent override (the second key won).
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("version: 1\n# caf\xe9\n".encode("latin-1"))
    twice = tmp_path / "twice.yaml"
    twice.write_text(yaml.safe_dump(small_requirements()) + "name: other\n", encoding="utf-8")
    for path, expected in (
        (latin1, "latin1.yaml: line 2 (byte 16) is not UTF-8"),
        (twice, "duplicate key 'name'"),
        (tmp_path, "cannot read requirements file"),
    ):
        assert main(["plan", str(path), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert expected in err
        assert "Traceback" not in err
