"""What LoRA adapters cost a replica: batched-adapter kernel time, GPU slots and slot swaps.

A pool serving adapters on its base model (vLLM's `--enable-lora`) pays three things the base
model alone does not:

* **Kernel time.** Each step that holds tokens of adapter requests runs the batched LoRA
  kernels (shrink and expand for every adapted projection, every layer): `LORA_TOKEN_SLOWDOWN`
  of the step's time in proportion to the share of its tokens that carry an adapter. (No
  separate fixed cost per step: vLLM's measurement below includes whatever fixed part there
  is, and a second term would count it twice.)
* **Slots.** vLLM keeps `max_loras` adapters on the GPU, each slot sized for `max_lora_rank`;
  one batch mixes at most `max_loras` distinct adapters, and a request whose adapter would make
  one too many waits (vLLM's scheduler skips it that step: `reason="deferred"` in
  `vllm:num_requests_waiting_by_reason`). The slots' memory comes out of the KV cache.
* **Swaps.** A request whose adapter is not in a slot has it copied in before its first step,
  from host memory (`--max-cpu-loras` holds every adapter of the pool, so never from disk):
  the adapter's per-GPU bytes over the host link (the catalog's `host_bw_gbps`), paid by the
  step that schedules it. The least recently used idle slot is replaced.

Adapter size: rank `r` on every linear projection of every layer (q, k, v, o, gate, up, down:
PEFT's `all-linear`, the costliest common choice), `r·(d_in + d_out)` parameters each, in
16-bit (vLLM's `lora_dtype: auto` is the activations' dtype), at `max_lora_rank` (vLLM pads each
slot to it). Per GPU, the share `1/tp` (vLLM shards the larger side of each pair).

Sources:

* `LORA_TOKEN_SLOWDOWN` = 0.045: vLLM's own throughput benchmark, Llama-2-7B on one A100,
  ShareGPT, 1,000 prompts (`benchmarks/benchmark_throughput.py`): 5,509.93 total tokens/s on the
  base model (vLLM PR #11267) against 5,272.77 with every request on a rank-8 adapter under the
  V1 engine and its Triton LoRA kernels (vLLM PR #11613, `--max-loras 4`): 4.5% more time per
  token. (The same benchmark under the V0 engine's kernels gave 3,656.98, 1.51x: superseded.)
  Punica (Chen et al., "Punica: Multi-Tenant LoRA Serving", MLSys 2024, arXiv:2310.18547)
  corroborates the order: its batched SGMV kernels add "only 2 ms latency per token", 4-7% of
  a 30-50 ms decode step.
* Slots and `max_cpu_loras`: vLLM's `LoRAConfig` (`max_loras` "max number of LoRAs in a single
  batch", default 1; `max_cpu_loras` default `max_loras`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from inhouse.perf.memory import MemoryPlan
from inhouse.spec.catalog import GpuSpec, ModelSpec

LORA_TOKEN_SLOWDOWN = 0.045
LORA_BYTES_PER_PARAM = 2.0


def adapter_params(model: ModelSpec, rank: int) -> int:
    """Parameters of one rank-`rank` adapter on every linear projection of every layer."""
    q_out = model.num_attention_heads * model.head_dim
    kv_out = model.num_kv_heads * model.head_dim
    d, m = model.hidden_size, model.intermediate_size
    per_layer = (d + q_out) + 2 * (d + kv_out) + (q_out + d) + 2 * (d + m) + (m + d)
    return rank * per_layer * model.num_layers


@dataclass(frozen=True, slots=True)
class LoraCost:
    """The LoRA terms of one replica configuration (see the module docstring)."""

    num_adapters: int
    max_loras: int
    max_lora_rank: int
    adapter_bytes_per_gpu: float
    load_s: float
    token_slowdown: float = LORA_TOKEN_SLOWDOWN

    def step_s(self, base_s: float, num_tokens: int, num_lora_tokens: int) -> float:
        """Time the adapters add to a step of `base_s` seconds (without loads)."""
        if num_lora_tokens == 0 or num_tokens == 0:
            return 0.0
        return self.token_slowdown * base_s * num_lora_tokens / num_tokens

    @property
    def slot_bytes_per_gpu(self) -> float:
        return self.max_loras * self.adapter_bytes_per_gpu


def lora_cost(
    model: ModelSpec, gpu: GpuSpec, tp: int, num_adapters: int, max_loras: int, rank: int
) -> LoraCost:
    per_gpu = adapter_params(model, rank) * LORA_BYTES_PER_PARAM / tp
    return LoraCost(
        num_adapters=num_adapters,
        max_loras=max_loras,
        max_lora_rank=rank,
        adapter_bytes_per_gpu=per_gpu,
        load_s=per_gpu / (gpu.host_bw_gbps * 1e9),
    )


def with_lora_slots(memory: MemoryPlan, lora: LoraCost) -> MemoryPlan:
    """The memory split once the adapter slots are taken out of the KV cache."""
    kv_bytes = memory.kv_bytes_per_gpu - lora.slot_bytes_per_gpu
    block_bytes = memory.kv_bytes_per_token_per_gpu * memory.block_size
    return dataclasses.replace(
        memory,
        reserve_bytes_per_gpu=memory.reserve_bytes_per_gpu + lora.slot_bytes_per_gpu,
        kv_bytes_per_gpu=kv_bytes,
        num_blocks=max(math.floor(kv_bytes / block_bytes), 0),
    )
