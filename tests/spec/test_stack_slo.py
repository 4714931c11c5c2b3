from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.spec.stack import PoolSlo, dump_stack, parse_stack


def stack_with(slo: object) -> dict[str, object]:
    return {"name": "demo", "pools": [{"name": "chat", "model": "Llama-3.1-8B", "slo": slo}]}


def test_slo_is_optional_and_round_trips() -> None:
    plain = parse_stack({"name": "demo", "pools": [{"name": "chat", "model": "Llama-3.1-8B"}]})
    assert plain.pools[0].slo is None
    assert "slo" not in dump_stack(plain)
    stack = parse_stack(stack_with({"ttft_p95_ms": 800, "ttft_alarm_ms": 1000}))
    assert parse_stack(__import__("yaml").safe_load(dump_stack(stack))) == stack


def test_alarm_defaults_to_the_target() -> None:
    slo = PoolSlo(ttft_p95_ms=800, ttft_alarm_ms=1000, itl_p95_ms=60)
    assert slo.alarm_ms("ttft") == 1000
    assert slo.alarm_ms("itl") == 60
    assert slo.alarm_ms("e2e") is None
    assert (slo.availability, slo.prefix_hit_rate_min) == (0.999, 0.6)


@pytest.mark.parametrize(
    ("slo", "match"),
    [
        ({"itl_p95_ms": 60, "itl_alarm_ms": 40}, "itl_alarm_ms .40.0. is below itl_p95_ms"),
        ({"availability": 1.0}, r"pools\.0\.slo\.availability"),
        ({"ttft_p95": 800}, r"pools\.0\.slo\.ttft_p95: unknown field"),
    ],
)
def test_bad_slo_names_the_field(slo: dict[str, object], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_stack(stack_with(slo))
