"""Attached (`url`) pools in a stack without `workloads`: render does not scrape their engines,
but the gateway times every answer by pool, so their latency SLO (`pools[].slo`, or render's
default) is alerted on the gateway's histograms; where the pool states no latency SLO at all,
render says which field to set instead of writing nothing."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

from tests.render.promtool_scenarios import (
    needs_promtool,
    promtool,
    run_scenarios,
    scenario,
    selector,
)

from inhouse.render import render_stack
from inhouse.render.layout import DEFAULT_SLO
from inhouse.render.prometheus import stack_rules
from inhouse.spec.stack import StackSpec, parse_stack
from inhouse.spec.vllm_buckets import TTFT_BUCKETS_S

METRIC = "inhouse_gateway_ttft_seconds"


def _stack(web_slo: dict[str, Any] | None = None) -> StackSpec:
    web: dict[str, Any] = {
        "name": "web",
        "model": "Llama-3.1-8B",
        "engine": "url",
        "replicas": 2,
        "urls": ["http://10.1.0.1:8000", "http://10.1.0.2:8000"],
    }
    if web_slo is not None:
        web["slo"] = web_slo
    return parse_stack({"name": "demo", "pools": [{"name": "chat", "model": "Qwen2.5-7B"}, web]})


def _ttft_series(bucket_s: float) -> list[tuple[str, str]]:
    """Every request to pool web answered its first token within (previous bucket, bucket_s]."""
    labels = {
        "tenant": "acme",
        "model": "Llama-3.1-8B",
        "pool": "web",
        "namespace": "demo",
        "job": "gateway",
        "instance": "10.0.1.1:8080",
        "pod": "gateway-0",
    }
    below = max(b for b in TTFT_BUCKETS_S if b < bucket_s)
    return [
        (selector(f"{METRIC}_bucket", {**labels, "le": str(below)}), "0x60"),
        (selector(f"{METRIC}_bucket", {**labels, "le": str(bucket_s)}), "0+10x60"),
        (selector(f"{METRIC}_bucket", {**labels, "le": "+Inf"}), "0+10x60"),
    ]


@needs_promtool
def test_an_attached_pool_pages_on_its_ttft(tmp_path: Path) -> None:
    stack = _stack()
    _, alerts = stack_rules(stack, "demo")
    mine = [a for a in alerts if a.name == "InhouseTTFTP95OverSLO" and a.labels["pool"] == "web"]
    assert len(mine) == 1, [a.labels for a in alerts if a.name == "InhouseTTFTP95OverSLO"]
    alert = mine[0]
    alarm_s = (DEFAULT_SLO.ttft_alarm_ms or 0) / 1000  # the pool states no slo
    # Slow: every answer in a bucket whose lower edge is at or above the alarm.
    pairs = pairwise(TTFT_BUCKETS_S)
    slow = next(b for lower, b in pairs if lower >= alarm_s)
    fast = max(b for b in TTFT_BUCKETS_S if b <= alarm_s / 2)
    tests = [
        scenario("slow first tokens", "15s", _ttft_series(slow), [("10m", alert, {"pool": "web"})]),
        scenario("fast first tokens", "15s", _ttft_series(fast), [("10m", alert, None)]),
    ]
    verdict = run_scenarios(tmp_path, render_stack(stack), tests)
    assert verdict == "", verdict


def test_an_attached_pool_without_a_latency_slo_is_named_in_the_notes() -> None:
    stack = _stack({"availability": 0.99})
    _, alerts = stack_rules(stack, "demo")
    latency = [a for a in alerts if a.name.endswith("P95OverSLO")]
    assert [a.labels["pool"] for a in latency] == ["chat"] * len(latency)
    notes = render_stack(stack).notes
    named = [n for n in notes if "pool web" in n and "pools[web].slo.ttft_p95_ms" in n]
    assert len(named) == 1, notes


@needs_promtool
def test_the_rendered_rule_tests_pass_with_an_attached_pool(tmp_path: Path) -> None:
    rendered = render_stack(_stack())
    assert "inhouse:gateway_ttft_seconds_by_pool:p95_5m" in rendered.files["prometheus/rules.yaml"]
    for name in ("rules.yaml", "rules_test.yaml"):
        (tmp_path / name).write_text(rendered.files[f"prometheus/{name}"])
    done = promtool(tmp_path, "test", "rules", "rules_test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
