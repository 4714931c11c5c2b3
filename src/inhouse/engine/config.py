"""Engine configuration: the knobs as the core runs them, resolved.

`engine.build_replica` is the one place that fills it, from the stack's `EngineKnobs` (same
names, `None`s settled) and what the memory split and the engine's constants decide
(`num_gpu_blocks`, `num_host_blocks`, the API server's delays, batch mixing)."""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.perf.lora import LoraCost


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Knobs of one engine replica.

    * `num_gpu_blocks`: KV blocks the replica holds (from `perf.plan_memory`).
    * `max_num_batched_tokens`: token budget of one step (prefill chunks plus decodes).
    * `long_prefill_token_threshold`: cap on one prompt's chunk per step (0: no cap).
    * `num_host_blocks`: capacity of the host-RAM KV tier (0: no tier).
    * `mixed_batches`: vLLM mixes prefill chunks and decodes in one step; SGLang (by default)
      runs prefill batches and decode batches apart, prefill first.
    * `request_overhead_s`, `prompt_token_overhead_s`: delay between a request's arrival and
      the scheduler seeing it: a fixed latency, plus the API server's work per prompt token,
      which it does for one request at a time.
    * `output_token_overhead_s`: the API server's work per streamed token; a step's tokens
      reach their clients when it has done it.
    * `reserve_new_tokens`: SGLang's admission (see `engine.reservation`): KV is reserved for
      the tokens running requests will still generate, and decode retracts requests when it
      runs out, instead of vLLM's allocate-as-you-go with preemption.
    * `recv_interval`: SGLang's `--scheduler-recv-interval`: after a decode step the scheduler
      takes new requests only every `recv_interval`-th step (after a prefill step, or idle,
      at once), so a request ready mid-interval waits for the next one (`engine.core`).
      1 (vLLM, and SGLang's default): every step.
    * `lora`: the adapters' slots and costs (`perf.lora`), when the replica serves LoRA
      adapters; requests naming an adapter then share `lora.max_loras` GPU slots.
    """

    num_gpu_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 131072
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    scheduling_policy: str = "priority"  # as EngineKnobs (a test keeps the two defaults equal)
    num_host_blocks: int = 0
    request_overhead_s: float = 0.0
    mixed_batches: bool = True
    prompt_token_overhead_s: float = 0.0
    output_token_overhead_s: float = 0.0
    reserve_new_tokens: bool = False
    recv_interval: int = 1
    lora: LoraCost | None = None

    def __post_init__(self) -> None:
        assert self.num_gpu_blocks > 0, "num_gpu_blocks must be positive"
        assert self.max_num_seqs > 0, "max_num_seqs must be positive"
        assert self.max_num_batched_tokens > 0, "max_num_batched_tokens must be positive"
        assert self.recv_interval >= 1, "recv_interval must be at least 1"
        assert self.scheduling_policy in ("fcfs", "priority"), "policy is fcfs or priority"
        assert (
            self.enable_chunked_prefill
            or not self.mixed_batches
            or self.max_num_batched_tokens >= self.max_model_len
        ), (
            "without chunked prefill a whole prompt must fit one step's token budget "
            "(SGLang's separate prefill batches take a longer one alone)"
        )
