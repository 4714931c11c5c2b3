"""`bench --plan`: the plan's workload read from plan.json, judged against its p95 targets after
the warm-up; failures worded with what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhouse.bench.failures import failure_lines
from inhouse.bench.metrics import Outcome, RequestResult
from inhouse.bench.plan_run import PlanWorkload, judge, load_plan_workload
from inhouse.bench.report import console_lines
from inhouse.errors import SpecError


def workload(**targets: float) -> PlanWorkload:
    return PlanWorkload(Path("plan"), "utility", "utility", {}, "utility", targets, 90.0, 18.0)


def result(t_sched: float, e2e_s: float, ok: bool = True) -> RequestResult:
    outcome = Outcome(0, t_sched, t_send=t_sched, success=ok, ttft_s=e2e_s / 2, latency_s=e2e_s)
    outcome.itl_s = [0.01, 0.02]
    outcome.completion_tokens = 3
    return RequestResult(outcome, "r", 100)


def test_the_warm_up_is_left_out_and_p95_meets_the_target() -> None:
    slow_start = [result(t, 30.0) for t in range(10)]  # cold caches during the warm-up
    steady = [result(20.0 + t, 1.0) for t in range(100)]
    verdict = judge(slow_start + steady, workload(e2e=2000.0))
    assert (verdict["counted"], verdict["failed"], verdict["pass"]) == (100, 0, True)
    assert verdict["metrics"]["e2e"]["p95_ms"] == pytest.approx(1000.0)


def test_a_p95_over_target_or_any_failure_misses_the_plan() -> None:
    late = [result(20.0 + t, 1.0) for t in range(90)] + [result(50.0, 9.0) for _ in range(10)]
    assert not judge(late, workload(e2e=2000.0))["metrics"]["e2e"]["pass"]
    failed = [result(t, 1.0) for t in range(99)] + [result(50.0, 0.0, ok=False)]
    verdict = judge(failed, workload(e2e=2000.0))
    assert verdict["failed"] == 1 and not verdict["pass"]
    # a shorter run keeps the plan's share of warm-up: 18 s of 90 is 2 s of 10
    short = judge([result(t, 1.0) for t in range(10)], workload(e2e=2000.0), duration_s=10.0)
    assert short["warmup_s"] == pytest.approx(2.0) and short["counted"] == 8


def test_plan_dir_errors_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"cannot read .*plan.json.*inhouse plan --out"):
        load_plan_workload(tmp_path, "chat")
    (tmp_path / "plan.json").write_text(json.dumps({"reproduce": {}}))
    with pytest.raises(SpecError, match=r"no reproduce.bench section; re-run `inhouse plan`"):
        load_plan_workload(tmp_path, "chat")
    bench = {"chat": {"workload": "agent", "params": {}, "model": "chat", "slo_p95_ms": {},
                      "duration_s": 90, "warmup_s": 18}}  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps({"reproduce": {"bench": bench}}))
    with pytest.raises(SpecError, match=r"'agent' is not a workload of the plan; .* one of: chat"):
        load_plan_workload(tmp_path, "agent")
    assert load_plan_workload(tmp_path, "chat").workload == "agent"


def test_a_401_says_how_to_pass_the_key() -> None:
    lines = failure_lines(
        {"HTTP 401: Incorrect API key provided.": 40, "timed out after 5 s": 2}, 42
    )
    assert lines[0] == "Failed requests: 42; top reasons:"
    assert "40 x HTTP 401" in lines[1]
    assert "--api-key KEY or set INHOUSE_API_KEY" in lines[2]
    assert "2 x timed out" in lines[3]
    assert failure_lines({}, 0) == []


def test_the_console_names_the_server_side_hit_rate_and_how_to_get_it() -> None:
    measured = {"server_metrics": [{"url": "e0", "hit_rate": 0.8}, {"url": "e1", "hit_rate": 0.9}],
                "prefix_cache_hit_rate_server": 0.85, "errors": {}, "failed": 0}  # fmt: skip
    assert console_lines(measured)[0].startswith("Server-side prefix-cache hit rate: 85.0% ")
    gateway = {"server_metrics": [{"url": "gw/metrics", "error": "no vllm counters"}],
               "prefix_cache_hit_rate_server": None, "errors": {}, "failed": 0}  # fmt: skip
    assert "--plan DIR to scrape the plan's engines" in console_lines(gateway)[0]


def test_a_run_s_warm_up_is_the_planner_s_rule_on_its_own_length() -> None:
    """The verdict scaled the plan's warm-up by the run's share of the plan's check: a 60 s
    run of a plan checked over 300 s left 6 s out where the planner (its first 20%, at most
    30 s) leaves 12 s, so `bench --plan` and `inhouse report` counted other requests."""
    plan = PlanWorkload(Path("plan"), "utility", "utility", {}, "utility", {"e2e": 2e3}, 300, 30)
    verdict = judge([result(t, 1.0) for t in range(60)], plan, duration_s=60.0)
    assert verdict["warmup_s"] == pytest.approx(0.2 * 60.0) and verdict["counted"] == 48
