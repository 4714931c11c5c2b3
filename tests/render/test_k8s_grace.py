"""terminationGracePeriodSeconds from the plan's p95 e2e plus the drain (issue 16 item 8)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from tests.render.conftest import ROOT, PlannedCrm
from tests.render.test_k8s import find

from inhouse.errors import SpecError
from inhouse.render import render_stack
from inhouse.render.layout import DISCOVERY_MARGIN_S, TEARDOWN_MARGIN_S, inflight_s
from inhouse.render.options import RenderOptions
from inhouse.spec.load import load_stack
from inhouse.spec.stack import StackSpec, parse_stack

WORKLOADS = ("Deployment", "StatefulSet")


def docs(stack: StackSpec, name: str) -> dict[str, Any]:
    rendered = render_stack(stack)
    for path, text in rendered.files.items():
        if path.startswith("k8s/"):
            for doc in yaml.safe_load_all(text):
                if doc and doc["kind"] in WORKLOADS and doc["metadata"]["name"] == name:
                    return doc  # type: ignore[no-any-return]
    raise AssertionError(name)


def grace(doc: dict[str, Any]) -> int:
    return int(doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])


def long_turns(e2e_ms: float, shutdown_s: int = 30) -> StackSpec:
    return parse_stack(
        {
            "name": "long",
            "nodes": [{"count": 1}],
            "pools": [
                {
                    "name": "chat",
                    "model": "Llama-3.1-8B",
                    "knobs": {"shutdown_timeout_s": shutdown_s},
                }
            ],
            "workloads": [
                {"name": "chat", "model": "Llama-3.1-8B", "planned_p95": {"e2e_ms": e2e_ms}}
            ],
        }
    )


def test_grace_covers_the_planned_p95_e2e_after_the_drain() -> None:
    prestop = RenderOptions().prestop_sleep_s
    stack = long_turns(45_200.0)
    assert grace(docs(stack, "chat")) == prestop + 46 + TEARDOWN_MARGIN_S
    assert grace(docs(stack, "gateway")) == prestop + 46 + TEARDOWN_MARGIN_S
    notes = render_stack(stack).notes
    assert any("shutdown_timeout_s 30 s is below the plan's p95 e2e 45.2 s" in n for n in notes)
    assert any("proxy.drain_timeout_s 30 s is below the plan's longest p95 e2e" in n for n in notes)
    short = long_turns(2_000.0)  # the drain is the longer: it sets the grace
    assert grace(docs(short, "chat")) == prestop + 30 + TEARDOWN_MARGIN_S


def test_the_plan_drains_its_p95_and_render_waits_for_it(crm_plan: PlannedCrm) -> None:
    stack = crm_plan.stack
    chat = next(w for w in stack.workloads if w.name == "chat")
    assert chat.planned_p95.e2e_ms is not None
    e2e_s = math.ceil(chat.planned_p95.e2e_ms / 1000)
    (pool,) = stack.pools
    assert pool.knobs.shutdown_timeout_s >= e2e_s
    prestop = RenderOptions().prestop_sleep_s
    for name in ("chat", "gateway"):
        assert grace(docs(stack, name)) >= prestop + e2e_s + TEARDOWN_MARGIN_S


def prestop(doc: dict[str, Any]) -> int:
    (vllm,) = doc["spec"]["template"]["spec"]["containers"]
    return int(vllm["lifecycle"]["preStop"]["exec"]["command"][1])


def test_a_scaled_pools_engines_sleep_out_the_dns_ttl_and_one_discovery_interval() -> None:
    """The gateway finds a scaled pool's pods by DNS every `discovery.interval_s` (5 s), and
    the cluster's DNS serves cached records for their TTL (30 s in kubeadm's CoreDNS): a
    terminating pod keeps getting new requests that long, so it drains only after."""
    code = load_stack(ROOT / "examples" / "code-assistant" / "stack.yaml")
    doc = docs(code, "standard")  # a scaled pool: one Deployment, found by DNS
    assert prestop(doc) == 30 + 5 + DISCOVERY_MARGIN_S
    assert grace(doc) == prestop(doc) + doc_inflight(code, "standard") + TEARDOWN_MARGIN_S
    short_ttl = render_stack(code, RenderOptions(dns_ttl_s=5))
    assert prestop(find(short_ttl, "Deployment", "standard")) == RenderOptions().prestop_sleep_s
    crm = load_stack(ROOT / "examples" / "crm-copilot" / "stack.yaml")
    assert prestop(docs(crm, "chat")) == RenderOptions().prestop_sleep_s  # own Service


def doc_inflight(stack: StackSpec, pool: str) -> int:
    return inflight_s(stack, next(p for p in stack.pools if p.name == pool))[0]


def test_a_dns_ttl_outside_coredns_range_is_refused() -> None:
    with pytest.raises(SpecError, match=r"--dns-ttl-s -1: the DNS TTL is 0\.\.3600 s"):
        RenderOptions(dns_ttl_s=-1)


def test_the_edge_outlasts_the_streams_it_carries() -> None:
    """Envoy exits at SIGTERM without draining (it drains only when asked on its admin port),
    so every stream through a terminating edge pod is cut when preStop ends: the sleep covers
    the drain from the Service and what the gateway behind it still streams."""
    stack = long_turns(45_200.0)
    edge = docs(stack, "edge")
    gateway = docs(stack, "gateway")
    inflight = grace(gateway) - RenderOptions().prestop_sleep_s - TEARDOWN_MARGIN_S
    assert inflight == 46  # the plan's p95 e2e, 45.2 s, rounded up
    assert prestop(edge) == RenderOptions().prestop_sleep_s + inflight
    assert grace(edge) == prestop(edge) + TEARDOWN_MARGIN_S


def split(planned: dict[str, float], max_model_len: int = 32_768) -> StackSpec:
    """A standard pool whose prompts above 6000 tokens go to a long-context pool; clients name
    the standard pool's model only."""
    return parse_stack(
        {
            "name": "split",
            "nodes": [{"count": 1}],
            "pools": [
                {"name": "chat", "model": "Llama-3.1-8B", "served_model_name": "chat",
                 "long_prompt_tokens": 6000, "long_pool": "chat-long"},
                {"name": "chat-long", "model": "Llama-3.1-8B", "role": "long",
                 "served_model_name": "chat-long", "knobs": {"max_model_len": max_model_len}},
            ],
            "workloads": [
                {"name": "chat", "model": "chat", "planned_p95": planned,
                 "slo": {"ttft_p95_ms": 2000, "itl_p95_ms": 50, "long_ttft_p95_ms": 8000}}
            ],
        }
    )  # fmt: skip


def test_the_long_pool_drains_its_long_prompts_p95_e2e() -> None:
    prestop = RenderOptions().prestop_sleep_s
    stack = split({"e2e_ms": 20_000.0, "long_e2e_ms": 90_400.0})
    assert grace(docs(stack, "chat-long")) == prestop + 91 + TEARDOWN_MARGIN_S
    assert grace(docs(stack, "gateway")) == prestop + 91 + TEARDOWN_MARGIN_S  # it streams them
    # The standard pool: the workload's p95 e2e (20 s) is under the 30 s drain.
    assert grace(docs(stack, "chat")) == prestop + 30 + TEARDOWN_MARGIN_S
    notes = render_stack(stack).notes
    assert any("pool chat-long: knobs.shutdown_timeout_s 30 s is below" in n for n in notes)


def test_without_the_long_prompts_e2e_the_long_pool_drains_its_longest_request() -> None:
    """An older plan's stack: the long pool's longest request (a prompt just over the length
    rule, output up to max_model_len) at the long TTFT target and the ITL target."""
    prestop = RenderOptions().prestop_sleep_s
    stack = split({"e2e_ms": 20_000.0}, max_model_len=16_384)
    bound_s = math.ceil(8 + (16_384 - 6000) * 0.050)
    assert grace(docs(stack, "chat-long")) == prestop + bound_s + TEARDOWN_MARGIN_S
    assert grace(docs(stack, "chat")) == prestop + 30 + TEARDOWN_MARGIN_S
