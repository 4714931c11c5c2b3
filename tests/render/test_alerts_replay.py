"""Issue 16 item 3: the plan's own simulated traffic, replayed as series through the rules the
plan renders, pages nobody at 1x peak and pages exactly the SLOs the simulation breaks at 3x.
The code assistant's plan adds a fallback pool: idle at peak, it pages nobody; in a failover
(every replica of its primary down) it decodes the primary's traffic, and its ITL alert pages
at the degraded-mode alarm it states, else at the workloads' (`alerts_itl`).

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
from tests.render.conftest import PlannedCrm, PlannedExample
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
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (.ci)")
NAMESPACE = "crm-copilot"
RUNBOOK = "runbook.md"
ITL = "InhouseITLP95OverSLO"
# Alerts whose series the replay carries (the rest watch gauges and GPUs it does not model).
INFRA_PAGES = (
    "InhouseEngineReplicaDown",
    "InhouseEngineReplicasMissing",
    "InhouseEnginePoolBelowDegraded",
    "InhouseEngineReplicaFlapping",
    "InhouseGatewayDown",
)


def simulated(
    planned: PlannedExample,
    multiple: float,
    down: dict[str, int] | None = None,
    stack: StackSpec | None = None,
) -> Replay:
    """The plan's traffic at `multiple` x its peak with `down` replicas down (the simulator's
    `down_replicas`), replayed for `stack` (the plan's, else one differing in its SLOs only,
    which the simulation does not read)."""
    requirements = planned.plan.requirements
    planning = requirements.planning
    duration = planning.verify_duration_s if multiple == 1.0 and not down else 60.0
    result = simulate_stack(
        planned.stack,
        mixed_workload(requirements, model_names(requirements)),
        policy=planning.routing_policy,
        duration_s=duration,
        seed=planning.seed,
        rate_scale=multiple,
        down_replicas=down,
    )
    warmup = min(MAX_WARMUP_S, WARMUP_FRACTION * duration)
    return replay(stack or planned.stack, result, warmup, duration, NAMESPACE, down)


def itl_alarm_ms(stack: StackSpec, pool: PoolSpec) -> float:
    """The ITL alarm a correct pager holds `pool` to: the tightest of the workloads it serves
    (every one decodes in its steps). A pool serving none, another's fallback, decodes only in
    a failover, for the workloads failing over onto it: at the degraded-mode alarm a `role:
    fallback` pool states for a failover (its `slo`), else at the tightest of theirs."""
    served = stack.workloads_served_by(pool)
    if not served:
        stated = pool.slo.alarm_ms("itl") if pool.role == "fallback" and pool.slo else None
        if stated is not None:
            return stated
        served = stack.workloads_failing_over_to(pool)
    return min(a for w in served if (a := w.slo.alarm_ms("itl")) is not None)


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
    if alert.name == ITL:
        pool = stack.pool(labels["pool"])
        itl = seen.p95_ms[f"pool:{pool.name}"].get("itl")  # None: it decoded nothing
        fires = itl is not None and itl > itl_alarm_ms(stack, pool)
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
        "prompt_tokens_p95": lambda: seen.prompt_p95.get(trigger.pool),
        "output_tokens_p95": lambda: seen.output_p95.get(trigger.pool),
        "prefix_hit_rate": lambda: seen.hit_rate.get(trigger.pool),
        "request_rate": lambda: seen.rate_per_s[trigger.model],
        "tpot_median": lambda: seen.tpot_median_ms.get(trigger.pool),
    }[trigger.signal]()
    if value is None:  # a pool that served nothing (its replicas down): no series to cross
        return None
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


def _fallback(stack: StackSpec) -> PoolSpec:
    (pool,) = [p for p in stack.pools if p.role == "fallback"]
    return pool


def _failover(stack: StackSpec) -> dict[str, int]:
    """Every replica of the pools that fail over onto the fallback pool, down."""
    return {p.name: p.replicas for p in stack.fallback_primaries(_fallback(stack))}


def _paged(test_checks: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(alert, pool) of each page a check expects (a workload's alerts name its pool too)."""
    return {
        (c["alertname"], a["exp_labels"].get("pool", ""))
        for c in test_checks
        for a in c["exp_alerts"]
    }


def test_a_fallback_pool_is_silent_at_peak_and_a_failover_pages_what_it_breaks(
    code_assistant_plan: PlannedExample, tmp_path: Path
) -> None:
    """At peak the fallback serves nothing: its ITL alert, which exists, reads no series and
    must stay silent. In a failover (its primary's replicas all down) it decodes the primary's
    traffic within its ITL alarm, while the first tokens wait and requests fail: the TTFT and
    burn pages fire, the fallback's ITL page does not. The replay's `up` of the down replicas
    is 0, which the infrastructure pages would page on (not judged here: test_alerts_ops)."""
    planned = code_assistant_plan
    stack = planned.stack
    fallback, down = _fallback(stack), _failover(stack)
    alerts = judged(stack)
    assert (ITL, fallback.name) in {(a.name, a.labels.get("pool")) for a in alerts}
    at_peak = simulated(planned, 1.0)
    failover = simulated(planned, 1.0, down)
    assert at_peak.p95_ms[f"pool:{fallback.name}"] == {}, "idle at peak"
    itl = failover.p95_ms[f"pool:{fallback.name}"]["itl"]
    assert itl < itl_alarm_ms(stack, fallback)
    peak_checks = checks(alerts, stack, at_peak)
    assert _paged(peak_checks) == set(), "the plan meets its SLOs at 1x: nothing may page"
    latency = [a for a in alerts if a.name not in INFRA_PAGES]
    failover_checks = checks(latency, stack, failover)
    primary = next(iter(down))
    assert _paged(failover_checks) == {
        ("InhouseTTFTP95OverSLO", primary),
        ("InhouseErrorBudgetBurnFast", primary),
    }, failover_checks
    run_promtool(
        tmp_path,
        stack,
        [
            as_test(at_peak, peak_checks, "the code assistant's traffic at 1x peak"),
            as_test(failover, failover_checks, "a failover onto the fallback pool at 1x peak"),
        ],
    )


def _restated(stack: StackSpec, fallback_itl_ms: float | None, workload_itl_ms: float) -> StackSpec:
    """`stack` with the fallback pool's degraded-mode ITL alarm `fallback_itl_ms` (None: its
    slo states none) and every workload's ITL alarm `workload_itl_ms` (targets 80% of each)."""
    data = stack.model_dump(mode="json", exclude_none=True)
    name = _fallback(stack).name
    for pool in data["pools"]:
        if pool["name"] == name:
            slo = {k: v for k, v in pool["slo"].items() if not k.startswith("itl_")}
            if fallback_itl_ms is not None:
                slo |= {"itl_p95_ms": 0.8 * fallback_itl_ms, "itl_alarm_ms": fallback_itl_ms}
            pool["slo"] = slo
    for workload in data["workloads"]:
        workload["slo"] |= {"itl_p95_ms": 0.8 * workload_itl_ms, "itl_alarm_ms": workload_itl_ms}
    return StackSpec.model_validate(data)


@pytest.mark.parametrize(
    ("fallback_alarm", "workload_alarm", "pages"),
    [
        # the fallback's own degraded-mode alarm, under its failover ITL, pages; the workloads',
        # over it, would not
        ("below", "above", True),
        # its own alarm, over its failover ITL, holds it; the workloads', under it, would page
        ("above", "below", False),
        # it states none: the workloads' alarm, under its failover ITL, pages
        (None, "below", True),
    ],
)
def test_the_fallback_pool_s_itl_page_in_a_failover_follows_its_degraded_mode_alarm(
    code_assistant_plan: PlannedExample,
    tmp_path: Path,
    fallback_alarm: str | None,
    workload_alarm: str,
    pages: bool,
) -> None:
    """The fallback pool serves no workload: the replay's oracle took the workloads it serves
    (none) and failed on an empty `min`. Its alarm is the one its `slo` states for a failover,
    else the tightest of the workloads failing over onto it; alarms a bucket of vLLM's ITL
    histogram off the failover's p95, either side, so its quantile reads the same side."""
    planned = code_assistant_plan
    down = _failover(planned.stack)
    fallback = _fallback(planned.stack)
    itl_ms = simulated(planned, 1.0, down).p95_ms[f"pool:{fallback.name}"]["itl"]
    edges_ms = [1000.0 * b for b in ITL_BUCKETS_S]
    alarm_ms = {
        "below": 0.8 * max(b for b in edges_ms if b < itl_ms),
        "above": 1.25 * min(b for b in edges_ms if b >= itl_ms),
    }
    stack = _restated(
        planned.stack,
        alarm_ms[fallback_alarm] if fallback_alarm else None,
        alarm_ms[workload_alarm],
    )
    failover = simulated(planned, 1.0, down, stack)
    itl_alerts = [a for a in judged(stack) if a.name == ITL]
    expected = checks(itl_alerts, stack, failover)
    assert _paged(expected) == ({(ITL, fallback.name)} if pages else set())
    (rule,) = [a for a in itl_alerts if a.labels["pool"] == fallback.name]
    threshold_ms = 1000.0 * float(rule.expr.rsplit(">", 1)[1])
    assert threshold_ms == pytest.approx(itl_alarm_ms(stack, stack.pool(fallback.name)))
    run_promtool(tmp_path, stack, [as_test(failover, expected, "the fallback's ITL")])
