"""Numbers in specs: no NaN or infinity, no YAML boolean read as 1 (`inhouse.spec.base`)."""

from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import parse_stack_text

STACK = """version: 1
name: tiny
pools:
  - name: chat
    model: meta-llama/Llama-3.1-8B-Instruct
"""


@pytest.mark.parametrize("word", ["yes", "on", "true"])
def test_a_yaml_boolean_is_not_one_replica(word: str) -> None:
    # pydantic read `true` (YAML's reading of yes/on) as 1: `replicas: yes` was one replica.
    with pytest.raises(SpecError, match=r"pools\.0\.replicas: .*is a boolean .*write the number"):
        parse_stack_text(STACK + f"    replicas: {word}\n", "stack.yaml")


def test_a_tenant_rpm_of_yes_is_not_one_request_a_minute() -> None:
    with pytest.raises(SpecError, match=r"tenants\.0\.limits\.rpm: .*is a boolean"):
        parse_gateway({"tenants": [{"name": "acme", "limits": {"rpm": True}}]})


def test_version_true_is_not_version_1() -> None:
    with pytest.raises(SpecError, match=r"version: .*is a boolean"):
        parse_stack_text(STACK.replace("version: 1", "version: true"), "stack.yaml")


def test_boolean_fields_still_take_booleans() -> None:
    stack = parse_stack_text(STACK + "    knobs: {enable_prefix_caching: no}\n", "stack.yaml")
    assert stack.pools[0].knobs.enable_prefix_caching is False
    routing = "    routing: {policy: cache_aware, params: {flag: true}}\n"
    assert parse_stack_text(STACK + routing, "s").pools[0].routing.params == {"flag": True}


@pytest.mark.parametrize(
    ("field", "where"),
    [
        ("    knobs: {host_kv_gib: .inf}\n", r"pools\.0\.knobs\.host_kv_gib"),
        ("    slo: {ttft_p95_ms: .nan}\n", r"pools\.0\.slo\.ttft_p95_ms"),
        ("observability: {usd_per_hour: .inf}\n", r"observability\.usd_per_hour"),
    ],
)
def test_nan_and_infinity_are_refused_by_field(field: str, where: str) -> None:
    # `.inf` passed `ge=0` and was an OverflowError in render; `.nan` failed `gt=0` saying
    # "should be greater than 0".
    with pytest.raises(SpecError, match=where + ": Input should be a finite number"):
        parse_stack_text(STACK + field, "stack.yaml")


def test_a_gateway_timeout_of_infinity_is_refused() -> None:
    with pytest.raises(SpecError, match=r"tiers\.batch\.queue_timeout_s: .*finite"):
        parse_gateway({"tiers": {"batch": {"queue_timeout_s": float("inf")}}})


def test_a_stray_digit_in_replicas_is_refused_not_a_memory_error() -> None:
    # 100000000000 replicas: render built a port list and simulate a prefix index per replica,
    # a MemoryError after 13 to 34 s.
    with pytest.raises(SpecError, match=r"pools\.0\.replicas: .*less than or equal to 1024"):
        parse_stack_text(STACK + "    replicas: 100000000000\n", "stack.yaml")
    with pytest.raises(SpecError, match=r"discovery\.max_replicas: .*less than or equal to 1024"):
        parse_gateway({"discovery": {"max_replicas": 10**11}})


def test_one_failing_pool_is_one_problem_not_also_an_empty_pools_list() -> None:
    # pydantic also reported `pools: Tuple should have at least 1 item` for the same pool.
    with pytest.raises(SpecError) as info:
        parse_stack_text(STACK + "    replcias: 2\n", "stack.yaml")
    assert str(info.value) == (
        "stack.yaml: 1 problem(s)\n"
        "  pools.0.replcias: unknown field; remove it or check its spelling against docs/stack.md"
    )


def test_a_bad_gateway_section_names_the_stack_file_at_load() -> None:
    # render and simulate read the section later as "stack: gateway" (no file), or not at all.
    with pytest.raises(SpecError, match=r"^stack\.yaml: gateway: 1 problem.*\n  tenats: unknown"):
        parse_stack_text(STACK + "gateway: {tenats: []}\n", "stack.yaml")
