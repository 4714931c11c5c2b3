"""One request's progress through the engine, and the record it leaves behind.

Progress is a single counter, as in vLLM V1: `num_computed_tokens` chases `num_tokens` (prompt
plus output so far). A prefill chunk, a prefix-cache hit and a recompute after preemption are all
just movements of that counter.
"""

from __future__ import annotations

import enum
from array import array
from collections.abc import Iterable


class Status(enum.Enum):
    PENDING = "pending"  # arrived, not yet visible to the scheduler (API-server overhead)
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class FinishReason(enum.Enum):
    LENGTH = "length"  # reached its output length (max_tokens or a sampled EOS)
    ABORT = "abort"


class Request:
    """A request's state in the engine. Mutable: the scheduler advances it step by step.

    `block_hashes` holds the chained hash of every full block of the request's token sequence
    that is known up front (the prompt, and for simulated multi-turn traffic also the output a
    later turn will re-send); blocks without a known hash are never cached.
    `output_len` is how many tokens the request will generate (`max_tokens`, or less when an EOS
    length was sampled). `lora` names the LoRA adapter it runs on (None: the base model).
    `arrival_seq` is the order in which it reached the scheduler (`Scheduler.add` sets it): the
    priority policy's last tie-break (`engine.queue.priority_order`).
    """

    __slots__ = (
        "arrival_s",
        "arrival_seq",
        "block_hashes",
        "block_ids",
        "finish_reason",
        "finish_s",
        "first_scheduled_s",
        "first_token_s",
        "lora",
        "num_cached_blocks",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_host_loaded_tokens",
        "num_output_tokens",
        "num_preemptions",
        "num_prompt_tokens",
        "output_len",
        "priority",
        "ready_s",
        "request_id",
        "status",
        "tag",
        "token_runs",
    )

    def __init__(
        self,
        request_id: str,
        num_prompt_tokens: int,
        output_len: int,
        arrival_s: float,
        block_hashes: list[int] | None = None,
        priority: int = 0,
        tag: object = None,
        lora: str | None = None,
    ) -> None:
        assert num_prompt_tokens > 0, "a request needs at least one prompt token"
        assert output_len > 0, "a request generates at least one token"
        self.request_id = request_id
        self.num_prompt_tokens = num_prompt_tokens
        self.output_len = output_len
        self.arrival_s = arrival_s
        self.arrival_seq: int | None = None
        self.ready_s = arrival_s
        self.block_hashes: list[int] = block_hashes if block_hashes is not None else []
        self.priority = priority
        self.tag = tag
        self.lora = lora
        self.status = Status.PENDING
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.block_ids: array[int] = array("q")  # KV blocks held, in sequence order
        self.num_cached_blocks = 0
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.finish_s: float | None = None
        self.finish_reason: FinishReason | None = None
        self.num_cached_tokens = 0
        self.num_host_loaded_tokens = 0
        self.num_preemptions = 0
        # Steps in which this request produced a token, as flat [start, end) pairs of step
        # indices into the engine's timeline: cheap to record even for a 10k-token output.
        self.token_runs: list[int] = []

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, prompt={self.num_prompt_tokens}, "
            f"out={self.num_output_tokens}/{self.output_len}, {self.status.value})"
        )


def record_token_steps(requests: Iterable[Request], start: int, end: int) -> None:
    """Each request produced a token in every step `start .. end-1`: extend its last run when
    that run ends at `start`, else start a run. One call per step or decode jump for the whole
    batch (the fleet simulator's hot loop: a call per request costs ~2% of a simulated hour)."""
    for request in requests:
        runs = request.token_runs
        if runs and runs[-1] == start:
            runs[-1] = end
        else:
            runs.append(start)
            runs.append(end)
