"""The no-FP8 row of "What would invalidate the plan": a layout that does not fit in BF16 is
said to not fit. The CRM memo read "holds" there (no re-forecast, so no breach) beside "re-plan:
none fits", as if BF16 would serve on the same node."""

from __future__ import annotations

from typing import Any

from inhouse.plan.memo import _sensitivity

PROBLEM = (
    "pool chat: Llama-3.3-70B bf16 on 2x h100_sxm (TP2) at gpu_memory_utilization 0.9: KV "
    "cache holds 25,520 tokens but 71,680 are needed (short by 7.0 GiB per GPU). Try a smaller "
    "max_model_len, an fp8 KV cache, a higher gpu_memory_utilization or a higher tensor-parallel "
    "degree."
)


def _row(fits: bool) -> dict[str, Any]:
    return {
        "name": "no_fp8",
        "change": "FP8 weights and FP8 KV cache not allowed",
        "same_layout": {"fits": fits, "problems": [] if fits else [PROBLEM]},
        "first_break": None,
        "breaks_at_size": None,
        "triggers": [],
        "trigger": "FP8 fails the held-out quality eval",
        "replan": {"usd_per_hour": None, "why_none": "needs 20 h100_sxm GPUs"},
    }


def _cell(row: dict[str, Any]) -> str:
    (line,) = [x for x in _sensitivity({"sensitivity": [row]}, {}) if x.startswith("| FP8")]
    return line.split(" | ")[1]


def test_a_layout_that_does_not_fit_in_bf16_is_not_said_to_hold() -> None:
    assert _cell(_row(fits=False)) == (
        "does not fit: pool chat: Llama-3.3-70B bf16 on 2x h100_sxm (TP2) at "
        "gpu_memory_utilization 0.9: KV cache holds 25,520 tokens but 71,680 are needed (short "
        "by 7.0 GiB per GPU)"
    )
    assert _cell(_row(fits=True)) == "holds"
