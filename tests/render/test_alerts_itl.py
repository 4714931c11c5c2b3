"""`alerts_itl`, a pool that is another pool's `fallback`: no workload names its model, so ITL,
alerted per pool for the workloads it serves, had no alert there, and during a failover, loaded
with its primary's traffic, its decode could slow to any pace unpaged. It pages at the ITL
alarm of the workloads that fail over onto it, or at the degraded-mode alarm its `slo` states."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.plan.plan_helpers import parse, small_requirements
from tests.render.promtool_scenarios import (
    needs_promtool,
    promtool,
    run_scenarios,
    scenario,
    selector,
)

from inhouse.plan.planner import characterize
from inhouse.plan.search import search
from inhouse.plan.stackgen import build_stack, with_plan_facts, workload_specs
from inhouse.render import render_stack
from inhouse.render.alerts import Alert
from inhouse.render.prometheus import stack_rules
from inhouse.spec.stack import StackSpec, parse_stack
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S

ITL = "InhouseITLP95OverSLO"
METRIC = "vllm:inter_token_latency_seconds_bucket"


def _stack(fallback_slo: dict[str, Any] | None = None) -> StackSpec:
    """Two primaries failing over onto one 8B pool; `code` has the tighter ITL alarm."""
    fallback: dict[str, Any] = {"name": "spare", "model": "Llama-3.1-8B", "role": "fallback",
                                "served_model_name": "spare-8b"}  # fmt: skip
    if fallback_slo is not None:
        fallback["slo"] = fallback_slo
    pools = [
        {"name": "chat", "model": "Qwen2.5-7B", "served_model_name": "chat", "fallback": "spare"},
        {"name": "code", "model": "Qwen2.5-7B", "served_model_name": "code", "fallback": "spare"},
        fallback,
    ]
    workloads = [
        {"name": "chat", "model": "chat", "slo": {"itl_p95_ms": 60, "itl_alarm_ms": 80}},
        {"name": "code", "model": "code", "slo": {"itl_p95_ms": 40, "itl_alarm_ms": 50}},
    ]
    return parse_stack({"name": "demo", "pools": pools, "workloads": workloads})


def _itl_alerts(stack: StackSpec) -> dict[str, Alert]:
    _, alerts = stack_rules(stack, "demo")
    return {a.labels["pool"]: a for a in alerts if a.name == ITL}


def _threshold_s(alert: Alert) -> float:
    return float(alert.expr.rsplit(">", 1)[1])


def _engine_itl(model_name: str, bucket_s: float) -> list[tuple[str, str]]:
    """A pool's inter-token gaps as its engines report them, all within (previous bucket,
    bucket_s]."""
    labels = {"model_name": model_name, "engine": "0", "namespace": "demo",
              "job": "spare-engine", "instance": "10.0.0.9:8000", "pod": "spare-0"}  # fmt: skip
    lower = max(b for b in ITL_BUCKETS_S if b < bucket_s)
    rising = "0+50x60"
    return [
        (selector(METRIC, {**labels, "le": str(lower)}), "0x60"),
        (selector(METRIC, {**labels, "le": str(bucket_s)}), rising),
        (selector(METRIC, {**labels, "le": "+Inf"}), rising),
    ]


def test_a_fallback_pool_is_alerted_at_the_tightest_itl_alarm_of_the_workloads_it_takes() -> None:
    stack = _stack()
    alerts = _itl_alerts(stack)
    assert set(alerts) == {"chat", "code", "spare"}, "an ITL alert for the fallback pool too"
    alert = alerts["spare"]
    taken = stack.workloads_failing_over_to(stack.pool("spare"))
    assert [w.name for w in taken] == ["chat", "code"]
    tightest = min(w.slo.alarm_ms("itl") or float("inf") for w in taken)
    assert _threshold_s(alert) == tightest / 1000
    assert 'model_name="spare-8b"' in alert.expr
    assert alert.labels == {"pool": "spare", "workload": "code"}
    assert "during a failover from pools chat, code" in alert.description
    assert "workloads[code].slo.itl_alarm_ms" in alert.threshold_source
    assert "fallback pool" in alert.runbook.mitigations[-1].lower()


def test_a_degraded_mode_itl_alarm_stated_for_the_fallback_pool_is_the_one_it_pages_at() -> None:
    stack = _stack({"itl_p95_ms": 80, "itl_alarm_ms": 100})
    alert = _itl_alerts(stack)["spare"]
    stated = stack.pool("spare").slo
    assert stated is not None and stated.itl_alarm_ms is not None
    assert _threshold_s(alert) == stated.itl_alarm_ms / 1000
    assert alert.threshold_source.startswith("stack pools[spare].slo.itl_alarm_ms")
    assert alert.labels == {"pool": "spare", "workload": "chat,code"}


def test_a_fallback_slo_without_an_itl_alarm_falls_back_to_the_workloads() -> None:
    stack = _stack({"ttft_p95_ms": 1500})
    alert = _itl_alerts(stack)["spare"]
    assert _threshold_s(alert) == (stack.workloads[1].slo.alarm_ms("itl") or 0) / 1000
    assert "states no degraded-mode" in alert.threshold_source


@pytest.mark.parametrize("degraded", [True, False])
def test_a_planned_fallback_pool_pages_at_the_degraded_itl_alarm_where_one_is_stated(
    degraded: bool,
) -> None:
    # `inhouse plan` writes the fallback pool's slo from the workload's degraded_slo (else its
    # slo): during a failover the degraded-mode SLO is in force, and the page says so.
    data = small_requirements()
    workload = data["workloads"][0]
    workload["models"]["fallback"] = "Qwen2.5-7B"
    workload["slo"] = {"ttft_p95_ms": 1000, "itl_p95_ms": 60, "itl_alarm_ms": 80}
    if degraded:
        workload["degraded_slo"] = {"ttft_p95_ms": 1500, "itl_p95_ms": 80, "itl_alarm_ms": 100}
    requirements = parse(data)
    profiles = characterize(requirements)
    found = search(requirements, profiles, requirements.planning).candidates
    candidate = next(c for c in found if c.fallbacks)
    stack = build_stack(candidate, requirements, profiles)
    stack = with_plan_facts(stack, workload_specs(requirements, None), ())
    (spare,) = [p for p in stack.pools if p.role == "fallback"]
    alert = _itl_alerts(stack)[spare.name]
    req = requirements.workloads[0]
    in_force = req.degraded_slo if degraded else req.slo
    assert in_force is not None
    assert _threshold_s(alert) == (in_force.alarm_ms("itl")) / 1000
    assert alert.threshold_source.startswith(f"stack pools[{spare.name}].slo.itl_alarm_ms")
    assert alert.description.startswith(f"Fallback pool {spare.name} during a failover")


def test_a_pool_nothing_fails_over_onto_has_no_itl_alert() -> None:
    data = _stack().model_dump(mode="json", exclude_defaults=True)
    for pool in data["pools"]:
        pool.pop("fallback", None)
    assert set(_itl_alerts(StackSpec.model_validate(data))) == {"chat", "code"}


def test_a_fallback_with_workloads_of_its_own_keeps_their_alarm_or_none() -> None:
    # Its one series cannot tell a failover from its own load: a failover's alarm there would
    # page on its own workloads, which state no ITL target.
    data = _stack().model_dump(mode="json", exclude_defaults=True)
    data["workloads"].append({"name": "batch", "model": "spare-8b", "slo": {"e2e_p95_ms": 20000}})
    assert set(_itl_alerts(StackSpec.model_validate(data))) == {"chat", "code"}
    data["workloads"][-1]["slo"] = {"itl_p95_ms": 150, "itl_alarm_ms": 200}
    stack = StackSpec.model_validate(data)
    alert = _itl_alerts(stack)["spare"]
    assert _threshold_s(alert) == (stack.workloads[-1].slo.alarm_ms("itl") or 0) / 1000
    assert alert.labels["workload"] == "batch"


@needs_promtool
def test_the_fallback_pool_pages_when_its_itl_passes_the_alarm(tmp_path: Path) -> None:
    stack = _stack()
    alert = _itl_alerts(stack)["spare"]
    alarm_s = _threshold_s(alert)
    slow = next(b for lower, b in pairwise(ITL_BUCKETS_S) if lower >= alarm_s)
    fine = max(b for b in ITL_BUCKETS_S if b <= alarm_s / 2)
    keeps = {"model_name": "spare-8b"}
    tests = [
        scenario("fallback slow", "15s", _engine_itl("spare-8b", slow), [("10m", alert, keeps)]),
        scenario("fallback fine", "15s", _engine_itl("spare-8b", fine), [("10m", alert, None)]),
    ]
    verdict = run_scenarios(tmp_path, render_stack(stack), tests)
    assert verdict == "", verdict


@needs_promtool
def test_the_rendered_rule_tests_pass_with_a_fallback_pool(tmp_path: Path) -> None:
    rendered = render_stack(_stack())
    body = yaml.safe_load(rendered.files["prometheus/rules_test.yaml"])
    fired = [
        expected["exp_labels"]
        for test in body["tests"]
        for check in test["alert_rule_test"]
        if check["alertname"] == ITL
        for expected in check["exp_alerts"]
    ]
    assert {"pool": "spare", "model_name": "spare-8b"}.items() <= next(
        (labels for labels in fired if labels.get("pool") == "spare"), {}
    ).items(), "the fallback pool's ITL alert has a case that fires it"
    for name in ("rules.yaml", "rules_test.yaml"):
        (tmp_path / name).write_text(rendered.files[f"prometheus/{name}"])
    done = promtool(tmp_path, "test", "rules", "rules_test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
