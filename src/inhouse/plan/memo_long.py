"""The memo's words for long prompts with a TTFT of their own (`slo.long_prompt_tokens`,
`slo.long_ttft_p95_ms`), and for the workloads that could state one and did not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inhouse.plan.memo_format import METRIC_NAMES, _ms

SPLIT_KINDS = ("longctx", "shared-prefix")


def metric_label(metric: str, long: Mapping[str, Any] | None) -> str:
    """A metric's name in the SLO table; with long prompts of their own, TTFT says which
    prompts each row holds."""
    if long is None or metric not in ("ttft", "long_ttft"):
        return METRIC_NAMES[metric]
    tokens = f"{long['above_tokens']:,} tokens"
    if metric == "ttft":
        return f"p95 TTFT, prompts up to {tokens}"
    return f"p95 TTFT, prompts above {tokens} (long-context pool)"


def long_prompt_note(r: Mapping[str, Any]) -> list[str]:
    """Which workloads hold long prompts to their own TTFT, and which hold every prompt to one
    (the default, said so that a reader does not assume a looser target for long prompts)."""
    checks = r["slo_check"]
    long = checks.get("long_prompts") or {}
    lines: list[str] = []
    for workload, item in long.items():
        lines.append(
            f"{workload}: prompts above {item['above_tokens']:,} tokens are served by a "
            f"long-context pool and held to p95 TTFT < {_ms(item['ttft']['target_ms'])} "
            "(`slo.long_ttft_p95_ms`); the TTFT target holds for the others. Each p95 is over "
            "its own prompts; the other targets hold for all of them."
        )
    kinds = {name: w.get("kind") for name, w in (r.get("workloads") or {}).items()}
    single = [
        workload
        for workload, targets in checks["targets"].items()
        if "ttft" in targets and workload not in long and kinds.get(workload) in SPLIT_KINDS
    ]
    if single:
        lines.append(
            f"{', '.join(single)}: one p95 TTFT target holds for every prompt length, the "
            "longest included (no `slo.long_prompt_tokens` and `slo.long_ttft_p95_ms`, which "
            "would give long prompts a looser target on a pool of their own)."
        )
    return lines
