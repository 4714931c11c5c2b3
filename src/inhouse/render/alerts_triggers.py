"""The plan's re-plan triggers as ticket alerts: one rule per `stack.triggers` entry, at the level
the sizing memo prints (both come from the same `inhouse.spec.triggers.Trigger`), each saying in
its `threshold_source` annotation which memo row set it and how.

A `prefix_hit_rate` trigger is the pool's InhousePrefixHitRateLow (it takes the place of the
SLO-table floor `pools[].slo.prefix_hit_rate_min`, so one pool never has two hit-rate tickets at
different levels); the others are InhouseReplan* alerts.
"""

from __future__ import annotations

import math

from inhouse.errors import SpecError
from inhouse.metric_names import replica_label
from inhouse.render.alerts import Alert, Case, RunbookEntry, Series
from inhouse.render.alerts_slo import engine_labels, gateway_labels, histogram_cases
from inhouse.spec.catalog import get_model
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.triggers import TOKEN_HISTOGRAMS, Trigger, describe, value_text
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S, build_1_2_5_buckets

GROUP = "inhouse-replan"
NAMES = {
    "prompt_tokens_p95": "InhouseReplanPromptsLonger",
    "output_tokens_p95": "InhouseReplanOutputsLonger",
    "prefix_hit_rate": "InhousePrefixHitRateLow",
    "request_rate": "InhouseReplanTrafficAbovePlan",
    "queue_every_replica": "InhouseReplanQueueOnEveryReplica",
    "tpot_median": "InhouseReplanTPOTAbovePlan",
}
# Cases for rules held an hour: one sample a minute, two hours of them.
HOUR_TIMING = ("1m", 120, "1h30m")


def max_model_len(pool: PoolSpec) -> int:
    """The largest count vLLM's token buckets cover, prompt or generation (`--max-model-len`,
    else the model's)."""
    if pool.knobs.max_model_len is not None:
        return pool.knobs.max_model_len
    try:
        return get_model(pool.model).max_context
    except SpecError:
        return 131072


def source_text(trigger: Trigger) -> str:
    if trigger.signal == "queue_every_replica":
        return (
            f"sizing memo section 7 row '{trigger.change_text}' ({trigger.change}): the plan "
            "leaves every replica free batch slots at peak, so requests waiting on all of them "
            "at once means the arrivals are burstier than planned (stack triggers[], written by "
            "inhouse plan)"
        )
    at = (
        f"breaks at {trigger.breaks_at:.2f}x, the trigger sits halfway"
        if trigger.breaks_at is not None
        else "holds at the full change; the trigger sits halfway to it"
    )
    return (
        f"sizing memo section 7 row '{trigger.change_text}' ({trigger.change}): {at}, at "
        f"{value_text(trigger, trigger.threshold)} against a planned "
        f"{value_text(trigger, trigger.planned)} (stack triggers[], written by inhouse plan)"
    )


def _query(trigger: Trigger) -> str:
    """The watched series, without the comparison."""
    name, window = trigger.model, trigger.window
    sel = f'{{model_name="{name}"}}'
    if trigger.signal in TOKEN_HISTOGRAMS:
        histogram = TOKEN_HISTOGRAMS[trigger.signal][0]
        return (
            "histogram_quantile(0.95, sum by (le, model_name) "
            f"(rate({histogram}_bucket{sel}[{window}])))"
        )
    if trigger.signal == "prefix_hit_rate":
        return (
            f"sum by (model_name) (rate(vllm:prefix_cache_hits_total{sel}[{window}]))\n/\n"
            f"sum by (model_name) (rate(vllm:prefix_cache_queries_total{sel}[{window}]))"
        )
    if trigger.signal == "request_rate":
        return f'sum by (model) (rate(inhouse_gateway_requests_total{{model="{name}"}}[{window}]))'
    if trigger.signal == "queue_every_replica":
        return f"min by (model_name) (vllm:num_requests_waiting{sel})"
    return (
        "histogram_quantile(0.5, sum by (le, model_name) "
        f"(rate(vllm:request_time_per_output_token_seconds_bucket{sel}[{window}])))"
    )


def rule_threshold(trigger: Trigger) -> float:
    """The number in the rule: the trigger's level in the series' unit (TPOT in seconds), to
    the 10 significant digits the rule prints (40.1 ms is 0.0401 s, not 0.040100000000000004)."""
    value = trigger.threshold / 1000 if trigger.signal == "tpot_median" else trigger.threshold
    return float(f"{value:.10g}")


def _expr(trigger: Trigger) -> str:
    op = "<" if trigger.falls else ">"
    joiner = "\n" if trigger.signal == "prefix_hit_rate" else " "
    return f"{_query(trigger)}{joiner}{op} {rule_threshold(trigger):.10g}"


def _counter_cases(trigger: Trigger, pool: PoolSpec) -> tuple[Case, ...]:
    if trigger.signal == "prefix_hit_rate":
        labels = engine_labels(pool)

        def hits(per_100: int) -> tuple[Series, ...]:
            return (
                Series(labels, f"0+{per_100}x120", "vllm:prefix_cache_hits_total"),
                Series(labels, "0+100x120", "vllm:prefix_cache_queries_total"),
            )

        low = max(0, math.floor(trigger.threshold * 100) - 10)
        high = min(100, math.ceil(trigger.threshold * 100) + 10)
        expect = {"model_name": trigger.model}
        return (
            Case("hit rate below the trigger", "1m", hits(low), "1h30m", expect),
            Case("hit rate as planned", "1m", hits(high), "1h30m", None),
        )
    labels = {**gateway_labels(pool, trigger.model), "replica": replica_label(0), "code": "200"}
    metric = "inhouse_gateway_requests_total"
    fast = math.ceil(trigger.threshold * 60 * 1.2) + 1  # per minute
    slow = math.floor(trigger.threshold * 60 * 0.8)
    return (
        Case(
            "traffic above the trigger",
            "1m",
            (Series(labels, f"0+{fast}x60", metric),),
            "40m",
            {"model": trigger.model},
        ),
        Case("traffic as planned", "1m", (Series(labels, f"0+{slow}x60", metric),), "40m", None),
    )


def _queue_cases(trigger: Trigger, pool: PoolSpec) -> tuple[Case, ...]:
    metric = "vllm:num_requests_waiting"
    replicas = [engine_labels(pool, i) for i in range(pool.replicas)]
    everywhere = tuple(Series(r, "3x40", metric) for r in replicas)
    one_idle = tuple(Series(r, "3x40" if i else "0x40", metric) for i, r in enumerate(replicas))
    expect = {"model_name": trigger.model}
    return (
        Case("a queue on every replica for 8 minutes", "15s", everywhere, "8m", expect),
        Case("one replica without a queue", "15s", one_idle, "8m", None),
    )


def trigger_cases(trigger: Trigger, pool: PoolSpec) -> tuple[Case, ...]:
    scope = f"trigger {trigger.change} on pool {pool.name}"
    expect = {"model_name": trigger.model}
    if trigger.signal in TOKEN_HISTOGRAMS:
        buckets = [float(b) for b in build_1_2_5_buckets(max_model_len(pool))]
        return histogram_cases(
            engine_labels(pool),
            TOKEN_HISTOGRAMS[trigger.signal][0],
            buckets,
            trigger.threshold,
            expect,
            scope,
            timing=HOUR_TIMING,
        )
    if trigger.signal == "tpot_median":
        return histogram_cases(
            engine_labels(pool),
            "vllm:request_time_per_output_token_seconds",
            ITL_BUCKETS_S,
            trigger.threshold / 1000,
            expect,
            scope,
            timing=HOUR_TIMING,
        )
    if trigger.signal == "queue_every_replica":
        return _queue_cases(trigger, pool)
    return _counter_cases(trigger, pool)


def trigger_alert(trigger: Trigger, pool: PoolSpec) -> Alert:
    labels = {"pool": pool.name, "change": trigger.change}
    if trigger.signal == "request_rate":
        labels["workload"] = ",".join(trigger.workloads)
    by = "model" if trigger.signal == "request_rate" else "model_name"
    return Alert(
        name=NAMES[trigger.signal],
        group=GROUP,
        expr=_expr(trigger),
        hold=trigger.hold,
        severity="ticket",
        labels=labels,
        summary=f"{{{{ $labels.{by} }}}}: the plan's assumption '{trigger.change_text}' no "
        "longer holds",
        description=f"Re-plan trigger from the sizing memo: {describe(trigger)}.",
        runbook=_runbook(trigger),
        cases=trigger_cases(trigger, pool),
        threshold_source=source_text(trigger),
    )


def _runbook(trigger: Trigger) -> RunbookEntry:
    return RunbookEntry(
        meaning="A watched series has crossed the level the sizing memo set halfway between the "
        "plan's assumption and the change that breaks the first SLO: the stack still meets its "
        "SLOs, but the margin the plan counted on is half gone. The `change` label names the "
        "memo row; `threshold_source` gives the arithmetic.",
        first_promql=" ".join(_query(trigger).split()),
        mitigations=(
            "Re-run `inhouse plan` with the requirements updated to what the series shows "
            "(longer prompts or answers, lower reuse, more sessions), and compare the memo "
            "with today's.",
            "Until then: check the SLO dashboards for the pool; shed or deprioritize batch "
            "tenants at the gateway if latency pages follow.",
        ),
        escalate="Ticket to the capacity owner; it becomes a page only through the SLO alerts.",
    )


def replan_alerts(stack: StackSpec) -> list[Alert]:
    return [trigger_alert(t, stack.pool(t.pool)) for t in stack.triggers]


def has_hit_trigger(stack: StackSpec, pool: PoolSpec) -> bool:
    return any(t.signal == "prefix_hit_rate" and t.pool == pool.name for t in stack.triggers)
