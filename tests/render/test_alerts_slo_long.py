"""A workload whose long prompts have a TTFT target of their own (`slo.long_prompt_tokens`,
`slo.long_ttft_p95_ms` in the requirements), served by a standard and a long-context pool: each
pool's share of the workload's first tokens pages at the target for the prompts it serves (the
gateway labels its TTFT series by `pool`). One series of all the prompts held to either target
missed one of them: at the long target the short prompts could run up to it unpaged, and a few
long prompts over theirs hide under the short ones' p95."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from tests.plan.plan_helpers import parse
from tests.plan.test_long_prompt_ttft import _long
from tests.render.promtool_scenarios import (
    needs_promtool,
    promtool,
    run_scenarios,
    scenario,
    selector,
)

from inhouse.plan.planner import characterize
from inhouse.plan.requirements import Requirements
from inhouse.plan.search import search
from inhouse.plan.stackgen import build_stack, with_plan_facts, workload_specs
from inhouse.render import render_stack
from inhouse.render.alerts import Alert
from inhouse.render.prometheus import stack_rules
from inhouse.spec.stack import StackSpec
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S, TTFT_BUCKETS_S

METRIC = "inhouse_gateway_ttft_seconds"
TTFT = "InhouseTTFTP95OverSLO"
ITL = "InhouseITLP95OverSLO"


def _requirements() -> Requirements:
    return parse(_long(long_prompt_tokens=6000, long_ttft_p95_ms=8000))


def _planned_stack(requirements: Requirements, *, split: bool) -> StackSpec:
    """The cheapest candidate with (or without) a long-context pool, as the plan writes it."""
    profiles = characterize(requirements)
    candidates = search(requirements, profiles, requirements.planning).candidates
    candidate = next(c for c in candidates if any(p.need.role == "long" for p in c.pools) == split)
    stack = build_stack(candidate, requirements, profiles)
    return with_plan_facts(stack, workload_specs(requirements, None), ())


def _ttft_alerts(stack: StackSpec) -> dict[str, Alert]:
    _, alerts = stack_rules(stack, "demo")
    return {
        a.labels["pool"]: a for a in alerts if a.name == TTFT and a.labels["workload"] == "chat"
    }


def _alarms_s(requirements: Requirements) -> tuple[float, float]:
    slo = requirements.workloads[0].slo
    return slo.alarm_ms("ttft") / 1000, slo.long_alarm_ms() / 1000


def _above(alarm_s: float) -> float:
    """A bucket whose lower edge is at or above the alarm: every answer in it is slow."""
    return next(b for lower, b in pairwise(TTFT_BUCKETS_S) if lower >= alarm_s)


def _below(alarm_s: float) -> float:
    return max(b for b in TTFT_BUCKETS_S if b <= alarm_s / 2)


def _series(pool: str, bucket_s: float, per_sample: int) -> list[tuple[str, str]]:
    """The workload's first tokens on `pool`, all within (previous bucket, bucket_s]."""
    labels = {
        "tenant": "acme",
        "model": "chat",
        "pool": pool,
        "namespace": "demo",
        "job": "gateway",
        "instance": "10.0.1.1:8080",
        "pod": "gateway-0",
    }
    lower = max(b for b in TTFT_BUCKETS_S if b < bucket_s)
    rising = f"0+{per_sample}x60"
    return [
        (selector(f"{METRIC}_bucket", {**labels, "le": str(lower)}), "0x60"),
        (selector(f"{METRIC}_bucket", {**labels, "le": str(bucket_s)}), rising),
        (selector(f"{METRIC}_bucket", {**labels, "le": "+Inf"}), rising),
    ]


def _verdict(tmp_path: Path, stack: StackSpec, name: str, series: list[tuple[str, str]],
             alert: Alert, keeps: dict[str, str] | None) -> str:  # fmt: skip
    test = scenario(name, "15s", series, [("10m", alert, keeps)])
    return run_scenarios(tmp_path, render_stack(stack), [test])


@needs_promtool
def test_short_prompts_slower_than_their_target_page_though_within_the_long_one(
    tmp_path: Path,
) -> None:
    requirements = _requirements()
    stack = _planned_stack(requirements, split=True)
    short_s, long_s = _alarms_s(requirements)
    slow = _above(short_s)
    assert slow < long_s  # slow for the short prompts, fine for the long ones
    series = _series("chat", slow, 10) + _series("chat-long", _below(long_s), 10)
    alert = _ttft_alerts(stack)["chat"]
    keeps = {"model": "chat", "pool": "chat"}
    assert _verdict(tmp_path, stack, "short prompts slow", series, alert, keeps) == ""


@needs_promtool
def test_long_prompts_slower_than_their_target_page_though_few(tmp_path: Path) -> None:
    requirements = _requirements()
    stack = _planned_stack(requirements, split=True)
    short_s, long_s = _alarms_s(requirements)
    # One long prompt for 20 short ones: under 5% of the requests, below any mixture's p95.
    series = _series("chat", _below(short_s), 20) + _series("chat-long", _above(long_s), 1)
    alerts = _ttft_alerts(stack)
    assert set(alerts) == {"chat", "chat-long"}, "a TTFT alert for each pool of the workload"
    keeps = {"model": "chat", "pool": "chat-long"}
    verdict = _verdict(tmp_path, stack, "long prompts slow", series, alerts["chat-long"], keeps)
    assert verdict == ""


@needs_promtool
def test_long_prompts_within_their_target_page_nothing(tmp_path: Path) -> None:
    requirements = _requirements()
    stack = _planned_stack(requirements, split=True)
    short_s, long_s = _alarms_s(requirements)
    # As many long prompts as short ones, above the short alarm and below the long one.
    between = _above(short_s)
    assert between < long_s
    series = _series("chat", _below(short_s), 10) + _series("chat-long", between, 10)
    for alert in _ttft_alerts(stack).values():
        assert _verdict(tmp_path, stack, "long prompts as planned", series, alert, None) == ""


def test_one_pool_for_every_prompt_length_is_alerted_at_the_long_target() -> None:
    # No long pool: the gateway cannot tell the lengths apart, so the series of all prompts is
    # held to the long target (its p95 is at most the larger of the two parts').
    requirements = _requirements()
    stack = _planned_stack(requirements, split=False)
    (alert,) = _ttft_alerts(stack).values()
    _, long_s = _alarms_s(requirements)
    assert alert.expr == f'inhouse:gateway_ttft_seconds:p95_5m{{model="chat"}} > {long_s:g}'


@needs_promtool
def test_the_rendered_rule_tests_pass_with_a_split_workload(tmp_path: Path) -> None:
    rendered = render_stack(_planned_stack(_requirements(), split=True))
    rules = rendered.files["prometheus/rules.yaml"]
    assert "inhouse:gateway_ttft_seconds_by_model_pool:p95_5m" in rules
    for name in ("rules.yaml", "rules_test.yaml"):
        (tmp_path / name).write_text(rendered.files[f"prometheus/{name}"])
    done = promtool(tmp_path, "test", "rules", "rules_test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def _engine_itl(pool: str, bucket_s: float) -> list[tuple[str, str]]:
    """A pool's inter-token gaps as its engines report them (vLLM's histogram, by its served
    name), all within (previous bucket, bucket_s]."""
    labels = {
        "model_name": pool,
        "engine": "0",
        "namespace": "demo",
        "job": f"{pool}-engine",
        "instance": "10.0.0.1:8000",
        "pod": f"{pool}-0",
    }
    metric = "vllm:inter_token_latency_seconds_bucket"
    lower = max(b for b in ITL_BUCKETS_S if b < bucket_s)
    rising = "0+50x60"
    return [
        (selector(metric, {**labels, "le": str(lower)}), "0x60"),
        (selector(metric, {**labels, "le": str(bucket_s)}), rising),
        (selector(metric, {**labels, "le": "+Inf"}), rising),
    ]


@needs_promtool
def test_the_long_pool_pages_when_its_itl_passes_the_workloads_alarm(tmp_path: Path) -> None:
    # No workload names the long pool's model (clients send `chat`; the length rule moves the
    # long prompts): ITL, alerted per pool for the workloads naming its model, had no alert
    # there, so the long prompts' decode could slow to any pace unpaged.
    requirements = _requirements()
    stack = _planned_stack(requirements, split=True)
    alarm_ms = requirements.workloads[0].slo.alarm_ms("itl")
    assert alarm_ms is not None
    _, alerts = stack_rules(stack, "demo")
    itl = {a.labels["pool"]: a for a in alerts if a.name == ITL}
    assert set(itl) == {"chat", "chat-long"}, "an ITL alert for each pool of the workload"
    alert = itl["chat-long"]
    slow = next(b for lower, b in pairwise(ITL_BUCKETS_S) if lower >= alarm_ms / 1000)
    fine = max(b for b in ITL_BUCKETS_S if b <= alarm_ms / 1000 / 2)
    keeps = {"model_name": "chat-long"}
    series = _engine_itl("chat", fine) + _engine_itl("chat-long", slow)
    assert _verdict(tmp_path, stack, "long pool's ITL slow", series, alert, keeps) == ""
    series = _engine_itl("chat", fine) + _engine_itl("chat-long", fine)
    assert _verdict(tmp_path, stack, "long pool's ITL fine", series, alert, None) == ""


def _with_fallback(stack: StackSpec) -> StackSpec:
    """The split stack with a fallback pool for both of the workload's pools, as `inhouse plan`
    writes one for a workload naming a fallback model (`plan.fallback_pools.with_fallbacks`)."""
    data = stack.model_dump(mode="json", exclude_defaults=True)
    standard = next(p for p in data["pools"] if p["name"] == "chat")
    spare = {**standard, "name": "chat-fallback", "served_model_name": "chat-fallback",
             "role": "fallback", "gpu_ids": [[4], [5]]}  # fmt: skip
    for field in ("long_prompt_tokens", "long_pool"):
        spare.pop(field)
    for pool in data["pools"]:
        pool["fallback"] = "chat-fallback"
    data["pools"].append(spare)
    return StackSpec.model_validate(data)


@needs_promtool
def test_the_workloads_requests_on_its_fallback_pool_page_when_slow(tmp_path: Path) -> None:
    # The gateway labels a request by the pool that served it: during a failover the split
    # workload's requests are on the fallback pool, in neither of its two pools' TTFT alerts.
    # (A workload on one pool is alerted by model alone, its fallback's answers included.)
    requirements = _requirements()
    stack = _with_fallback(_planned_stack(requirements, split=True))
    short_s, long_s = _alarms_s(requirements)
    alerts = _ttft_alerts(stack)
    assert set(alerts) == {"chat", "chat-long", "chat-fallback"}, "the fallback's share too"
    alert = alerts["chat-fallback"]
    keeps = {"model": "chat", "pool": "chat-fallback"}
    series = _series("chat-fallback", _above(long_s), 10)
    assert _verdict(tmp_path, stack, "fallback slow", series, alert, keeps) == ""
    # Short and long prompts mixed there, as on one pool: held to the long target.
    between = _above(short_s)
    assert between < long_s
    series = _series("chat-fallback", between, 10)
    assert _verdict(tmp_path, stack, "fallback within the long target", series, alert, None) == ""
