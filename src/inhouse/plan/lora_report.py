"""The LoRA numbers a plan used, for `plan.json` and the memo (`perf.lora` has the sources)."""

from __future__ import annotations

from typing import Any

from inhouse.perf.lora import LORA_TOKEN_SLOWDOWN
from inhouse.plan.planner import Plan

SOURCES = (
    "batched-adapter kernel time: vLLM's benchmark_throughput, Llama-2-7B on an A100, 5,509.93 "
    "tokens/s on the base model (vLLM PR #11267) against 5,272.77 on a LoRA adapter (V1, PR "
    "#11613), 4.5% more time per token, of the order Punica reports (2 ms per decode step, "
    "arXiv:2310.18547); slot swaps: adapter bytes per GPU over the catalog's host link"
)


def lora_pools(plan: Plan) -> list[dict[str, Any]]:
    """One entry per pool serving adapters: the costs the simulator and the analytic model
    charged it."""
    out = []
    for pool in plan.chosen.pools:
        lora = pool.replica.config.lora
        if lora is None:
            continue
        out.append(
            {
                "pool": pool.need.name,
                "adapters": list(pool.replica.spec.lora_adapters),
                "max_loras": lora.max_loras,
                "max_lora_rank": lora.max_lora_rank,
                "adapter_mb_per_gpu": lora.adapter_bytes_per_gpu / 1e6,
                "slots_gib_per_gpu": lora.slot_bytes_per_gpu / 1024**3,
                "swap_load_ms": 1000.0 * lora.load_s,
                "token_slowdown": lora.token_slowdown,
                "sources": SOURCES,
            }
        )
    return out


def lora_assumptions(plan: Plan) -> list[str]:
    entries = lora_pools(plan)
    if not entries:
        return [
            "LoRA: no pool serves adapters. Where one would, the batched-adapter kernels add "
            f"{LORA_TOKEN_SLOWDOWN:.1%} of each step per share of its tokens on an adapter "
            f"({SOURCES})."
        ]
    out = []
    for e in entries:
        swaps = (
            "one slot per adapter, so none swaps"
            if e["max_loras"] >= len(e["adapters"])
            else f"{e['max_loras']} slots for {len(e['adapters'])} adapters"
        )
        out.append(
            f"LoRA on {e['pool']} ({', '.join(e['adapters'])}): rank {e['max_lora_rank']} on "
            f"every linear projection, {e['adapter_mb_per_gpu']:,.0f} MB per GPU per adapter; "
            f"{swaps} ({e['slots_gib_per_gpu']:.2f} GiB per GPU taken from the KV cache; a swap "
            f"loads from host memory in {e['swap_load_ms']:.1f} ms); the batched-adapter kernels "
            f"add {e['token_slowdown']:.1%} of each step per share of its tokens on an adapter "
            f"({SOURCES})."
        )
    return out
