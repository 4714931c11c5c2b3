"""A stack's workloads: the long prompts' own TTFT target (`slo.long_ttft_p95_ms`)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from inhouse.errors import SpecError
from inhouse.spec.stack import dump_stack, parse_stack


def stack_with(slo: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "demo",
        "pools": [
            {"name": "code", "model": "Llama-3.1-8B", "served_model_name": "code",
             "long_prompt_tokens": 6000, "long_pool": "code-long"},
            {"name": "code-long", "model": "Llama-3.1-8B", "served_model_name": "code-long",
             "role": "long"},
        ],
        "workloads": [{"name": "code", "model": "code", "slo": slo}],
    }  # fmt: skip


def test_the_long_prompts_target_round_trips() -> None:
    slo = {"ttft_p95_ms": 1000, "long_ttft_p95_ms": 4000, "long_ttft_alarm_ms": 5000}
    stack = parse_stack(stack_with(slo))
    assert parse_stack(yaml.safe_load(dump_stack(stack))) == stack
    long = stack.workloads[0].slo.for_long_prompts()
    assert (long.ttft_p95_ms, long.alarm_ms("ttft")) == (4000, 5000)


@pytest.mark.parametrize(
    ("slo", "match"),
    [
        (
            {"ttft_p95_ms": 1000, "long_ttft_p95_ms": 4000, "long_ttft_alarm_ms": 3000},
            r"long_ttft_alarm_ms \(3000\) is below long_ttft_p95_ms \(4000\)",
        ),
        (
            {"ttft_p95_ms": 1000, "long_ttft_alarm_ms": 3000},
            r"long_ttft_alarm_ms \(3000\) has no long_ttft_p95_ms",
        ),
        ({"ttft_p95_ms": 1000, "long_ttft_p95_ms": 500}, r"long_ttft_p95_ms \(500\) loosens"),
        ({"long_ttft_p95_ms": 4000}, "state ttft_p95_ms"),
    ],
)
def test_a_bad_long_prompts_target_names_the_field(slo: dict[str, Any], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        parse_stack(stack_with(slo))
