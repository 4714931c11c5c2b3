"""Issue 16 item 3: the plan's own simulated traffic, replayed as series through the rules the
plan renders, pages nobody at 1x peak and pages exactly the SLOs the simulation breaks at 3x.

The expected pages come from the simulated p95s against each workload's alarm (the ground
truth), never from the rules themselves; promtool then evaluates the rendered rules on series
that encode those same requests.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.render.conftest import PlannedCrm
from tests.render.promtool_scenarios import promtool
from tests.render.replay import Replay, as_test, replay

from inhouse.fleet import simulate_stack
from inhouse.metric_names import replica_label
from inhouse.plan.planner import model_names
from inhouse.plan.verify import MAX_WARMUP_S, WARMUP_FRACTION, mixed_workload
from inhouse.render.alerts import Alert, expected_alert, render_rules
from inhouse.render.alerts_burn import MIN_FAILED_TO_PAGE
from inhouse.render.alerts_triggers import rule_threshold
from inhouse.render.prometheus import stack_rules
from inhouse.spec.stack import StackSpec

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (.ci)")
NAMESPACE = "crm-copilot"
RUNBOOK = "runbook.md"
# Alerts whose series the replay carries (the rest watch gauges and GPUs it does not model).
INFRA_PAGES = (
    "InhouseEngineReplicaDown",
    "InhouseEngineReplicasMissing",
    "InhouseEnginePoolBelowDegraded",
    "InhouseEngineReplicaFlapping",
    "InhouseGatewayDown",
)


def simulated(crm: PlannedCrm, multiple: float) -> Replay:
    requirements = crm.plan.requirements
    planning = requirements.planning
    duration = planning.verify_duration_s if multiple == 1.0 else 60.0
    result = simulate_stack(
        crm.stack,
        mixed_workload(requirements, model_names(requirements)),
        policy=planning.routing_policy,
        duration_s=duration,
        seed=planning.seed,
        rate_scale=multiple,
    )
    warmup = min(MAX_WARMUP_S, WARMUP_FRACTION * duration)
    return replay(crm.stack, result, warmup, duration, NAMESPACE)


def truth(alert: Alert, stack: StackSpec, seen: Replay) -> dict[str, str] | None:
    """The labels the alert's expression keeps if a correct pager fires it on this traffic,
    else None: each figure measured by the simulator against its threshold."""
    labels = alert.labels
    if alert.name in ("InhouseTTFTP95OverSLO", "InhouseE2EP95OverSLO"):
        workload = next(w for w in stack.workloads if w.name == labels["workload"])
        key = "ttft" if "TTFT" in alert.name else "e2e"
        alarm = workload.slo.alarm_ms(key)
        assert alarm is not None
        return {"model": workload.model} if seen.p95_ms[workload.name][key] > alarm else None
    if alert.name == "InhouseITLP95OverSLO":
        pool = stack.pool(labels["pool"])
        alarms = [w.slo.alarm_ms("itl") for w in stack.workloads_served_by(pool)]
        alarm = min(a for a in alarms if a is not None)
        fires = seen.p95_ms[f"pool:{pool.name}"]["itl"] > alarm
        return {"model_name": pool.client_model_name} if fires else None
    if alert.name == "InhouseErrorBudgetBurnFast":
        workload = next(w for w in stack.workloads if w.name == labels["workload"])
        budget = 1 - workload.slo.availability
        ratio = seen.error_ratio[workload.name]
        failed_per_hour = ratio * seen.rate_per_s[workload.name] * 3600
        fires = ratio > 14.4 * budget and failed_per_hour >= MIN_FAILED_TO_PAGE
        return {"model": workload.model} if fires else None
    if alert.name in INFRA_PAGES:
        return None
    trigger = next(
        t
        for t in stack.triggers
        if t.change == labels["change"]
        and t.pool == labels["pool"]
        and ",".join(t.workloads) == labels.get("workload", ",".join(t.workloads))
    )
    value = {
        "prompt_tokens_p95": lambda: seen.prompt_p95[trigger.pool],
        "output_tokens_p95": lambda: seen.output_p95[trigger.pool],
        "prefix_hit_rate": lambda: seen.hit_rate[trigger.pool],
        "request_rate": lambda: seen.rate_per_s[trigger.model],
        "tpot_median": lambda: seen.tpot_median_ms[trigger.pool],
    }[trigger.signal]()
    crossed = value < trigger.threshold if trigger.falls else value > trigger.threshold
    key = "model" if trigger.signal == "request_rate" else "model_name"
    return {key: trigger.model} if crossed else None


def judged(stack: StackSpec) -> list[Alert]:
    """Every page the replay can judge, and every re-plan trigger it carries series for."""
    _, alerts = stack_rules(stack, NAMESPACE)
    replayable = {
        "prompt_tokens_p95",
        "output_tokens_p95",
        "prefix_hit_rate",
        "request_rate",
        "tpot_median",
    }
    signals = {(t.change, t.pool): t.signal for t in stack.triggers}

    def has_series(alert: Alert) -> bool:
        if "change" in alert.labels:
            return signals[(alert.labels["change"], alert.labels["pool"])] in replayable
        unmodelled = alert.name == "InhouseKVCacheFull" or alert.name.startswith("InhouseGPU")
        return alert.severity == "page" and not unmodelled

    return [a for a in alerts if has_series(a)]


def checks(alerts: list[Alert], stack: StackSpec, seen: Replay) -> list[dict[str, Any]]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for alert in alerts:
        expected = by_name.setdefault(alert.name, [])
        keeps = truth(alert, stack, seen)
        if keeps is not None:
            expected.append(expected_alert(alert, keeps, RUNBOOK))
    return [{"alertname": name, "exp_alerts": exp} for name, exp in by_name.items()]


def run_promtool(tmp_path: Path, stack: StackSpec, tests: list[dict[str, Any]]) -> str:
    recordings, alerts = stack_rules(stack, NAMESPACE)
    (tmp_path / "rules.yaml").write_text(render_rules(recordings, alerts, RUNBOOK))
    (tmp_path / "replay_test.yaml").write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests},
            sort_keys=False,
        )
    )
    done = promtool(tmp_path, "test", "rules", "replay_test.yaml", timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def fired(test_checks: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {
        (c["alertname"], a["exp_labels"].get("workload", a["exp_labels"].get("pool", "")))
        for c in test_checks
        for a in c["exp_alerts"]
    }


def test_the_plan_pages_nobody_at_peak_and_the_right_slos_at_3x(
    crm_plan: PlannedCrm, tmp_path: Path
) -> None:
    stack = crm_plan.stack
    alerts = judged(stack)
    at_peak, at_3x = simulated(crm_plan, 1.0), simulated(crm_plan, 3.0)
    peak_checks, overload_checks = checks(alerts, stack, at_peak), checks(alerts, stack, at_3x)
    assert fired(peak_checks) == set(), "the plan meets its SLOs at 1x: nothing may page"
    pages = {name for name, _ in fired(overload_checks) if name.endswith("OverSLO")}
    assert {"InhouseTTFTP95OverSLO", "InhouseE2EP95OverSLO"} <= pages, fired(overload_checks)
    traffic = {w for name, w in fired(overload_checks) if name == "InhouseReplanTrafficAbovePlan"}
    assert traffic == {w.name for w in stack.workloads}
    run_promtool(
        tmp_path,
        stack,
        [
            as_test(at_peak, peak_checks, "the plan's traffic at 1x peak"),
            as_test(at_3x, overload_checks, "the plan's traffic at 3x peak"),
        ],
    )


def test_the_chat_pool_is_not_held_to_the_utility_e2e(crm_plan: PlannedCrm) -> None:
    """The defect: the chat pool inherited utility's 2 s e2e and paged for ever at planned load
    (chat turns run for seconds by design)."""
    _, alerts = stack_rules(crm_plan.stack, NAMESPACE)
    e2e = [a for a in alerts if a.name == "InhouseE2EP95OverSLO"]
    assert [a.labels["workload"] for a in e2e] == ["utility"]
    assert 'model="utility"' in e2e[0].expr
    chat = next(w for w in crm_plan.stack.workloads if w.name == "chat")
    assert chat.planned_p95.e2e_ms is not None and chat.planned_p95.e2e_ms > 3000
    # and the thresholds in the rules are the trigger levels, nothing else
    for trigger in crm_plan.stack.triggers:
        assert any(f"{rule_threshold(trigger):.10g}" in a.expr for a in alerts), trigger


def test_per_pool_alerts_paged_at_planned_load(crm_plan: PlannedCrm, tmp_path: Path) -> None:
    """What the plan's stack rendered before: one pool SLO, the strictest of its workloads
    (chat's TTFT and ITL, utility's 2 s e2e), alerted on vLLM's series by served model. The
    chat turns' own e2e (about 20 s at p95, by design) pages it at 1x peak."""
    stack = crm_plan.stack
    pool = stack.pools[0]
    merged = pool.slo.model_copy(update={"e2e_p95_ms": 2000.0, "e2e_alarm_ms": 3000.0})  # type: ignore[union-attr]
    old = StackSpec.model_validate(
        {
            **stack.model_dump(),
            "workloads": (),
            "triggers": (),
            "pools": (pool.model_copy(update={"slo": merged}),),
        }
    )
    _, alerts = stack_rules(old, NAMESPACE)
    (e2e,) = [a for a in alerts if a.name == "InhouseE2EP95OverSLO"]
    at_peak = simulated(crm_plan, 1.0)
    assert at_peak.p95_ms["chat"]["e2e"] > 3000 > at_peak.p95_ms["utility"]["e2e"]
    expected = [expected_alert(e2e, {"model_name": pool.client_model_name}, RUNBOOK)]
    check = {"alertname": e2e.name, "exp_alerts": expected}
    run_promtool(tmp_path, old, [as_test(at_peak, [check], "per-pool e2e at 1x")])


def test_error_ratios_record_zero_without_errors(tmp_path: Path) -> None:
    """A workload that had no 5xx records a ratio of 0, not nothing: promtool evaluates the
    recording on traffic with only 200s."""
    stack = StackSpec.model_validate(
        {
            "name": "s",
            "pools": [{"name": "p", "model": "Llama-3.1-8B", "served_model_name": "m"}],
            "workloads": [{"name": "w", "model": "m"}],
        }
    )
    recordings, alerts = stack_rules(stack, NAMESPACE)
    (tmp_path / "rules.yaml").write_text(render_rules(recordings, alerts, RUNBOOK))
    labels = f'tenant="t",model="m",pool="p",replica="{replica_label(0)}",code="200"'
    ok = f"inhouse_gateway_requests_total{{{labels}}}"
    test = {
        "interval": "1m",
        "input_series": [{"series": ok, "values": "0+60x20"}],
        "promql_expr_test": [
            {
                "expr": f"inhouse:gateway_error_ratio{suffix}:rate5m",
                "eval_time": "10m",
                "exp_samples": [{"labels": f"inhouse:gateway_error_ratio{suffix}:rate5m{{{by}}}",
                                 "value": 0}],
            }
            for suffix, by in (("", 'pool="p"'), ("_by_model", 'model="m"'))
        ],
    }  # fmt: skip
    (tmp_path / "ratio_test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [test]})
    )
    done = promtool(tmp_path, "test", "rules", "ratio_test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
