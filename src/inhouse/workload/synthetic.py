"""Single-request workloads: `utility`, `longctx`, `shared-prefix` and `fixed`.

* `utility`: short summarize / classify / extract calls; each of `num_tasks` tasks has its own
  instruction prefix of `instruction_tokens`, followed by a unique document. Ideal cache: the
  instruction, once its task was seen.
* `longctx`: document QA. A prompt (lengths from `prompt`'s p50/p95) is a document plus a short
  question; with probability `1/questions_per_document` the document is new, else one of the
  `open_documents` most recent ones is asked about again. Ideal cache: the document, when asked
  again.
* `shared-prefix`: `num_groups` groups; every request is a group's prefix of `prefix_tokens`
  plus a unique suffix. Ideal cache: the prefix, once its group was seen.
* `fixed`: closed loop, `concurrency` clients sending exactly `input_tokens` random prompt tokens
  and `output_tokens` output tokens, back to back (plus `think_time_s`). Ideal cache: nothing.

Open-loop ones take an `Arrivals` (default Poisson).
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from dataclasses import dataclass, field

from inhouse.hashing import SpanHasher
from inhouse.workload.arrivals import Arrivals, GapSampler, Lengths, sample_think_s
from inhouse.workload.base import ScheduledRun, WorkRequest, ideal_cached_tokens


class OpenLoopRun(ScheduledRun):
    """Requests at the arrival process's times; `make(rng)` gives each one's prompt spans and
    how many leading tokens an infinite cache would hold."""

    def __init__(
        self,
        name: str,
        arrivals: Arrivals,
        seed: int,
        duration_s: float,
        scale: float,
        block_size: int,
        output: Lengths,
        model: str | None,
    ) -> None:
        super().__init__(name, duration_s)
        self.block_size = block_size
        self.output = output
        self.model = model
        self.rng = random.Random(f"{name}:{seed}")
        self.span = itertools.count(1)
        self._gaps = GapSampler(arrivals.scaled(scale), random.Random(f"{name}-arrivals:{seed}"))
        self.schedule(0.0, self._arrive)

    def content(self) -> tuple[list[tuple[int, int]], int]:
        raise NotImplementedError

    def _arrive(self, request_id: str, at_s: float) -> WorkRequest:
        self.schedule(self._gaps.next_arrival_s(at_s), self._arrive)
        spans, known_tokens = self.content()
        hasher = SpanHasher(self.block_size)
        hasher.extend_all(spans)
        prompt = hasher.num_tokens
        ideal = ideal_cached_tokens(prompt, known_tokens // self.block_size, self.block_size)
        hashes = hasher.hashes
        return WorkRequest(
            request_id,
            at_s,
            prompt,
            self.output.sample(self.rng),
            hashes,
            len(hashes),
            ideal,
            None,
            self.model,
        )


@dataclass(frozen=True, slots=True)
class UtilityWorkload:
    arrivals: Arrivals = field(default_factory=lambda: Arrivals("poisson", rate_per_s=5.0))
    num_tasks: int = 3
    instruction_tokens: int = 300
    document: Lengths = field(default_factory=lambda: Lengths(800, 3000))
    output: Lengths = field(default_factory=lambda: Lengths(100, 400))
    model: str | None = None

    name = "utility"

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> ScheduledRun:
        return _UtilityRun(self, block_size, seed, duration_s, rate_scale)


class _UtilityRun(OpenLoopRun):
    def __init__(
        self, spec: UtilityWorkload, block_size: int, seed: int, duration_s: float, scale: float
    ) -> None:
        super().__init__(
            "utility", spec.arrivals, seed, duration_s, scale, block_size, spec.output, spec.model
        )
        self.spec = spec
        self._task_span = [next(self.span) for _ in range(spec.num_tasks)]
        self._seen = [False] * spec.num_tasks

    def content(self) -> tuple[list[tuple[int, int]], int]:
        spec = self.spec
        task = self.rng.randrange(spec.num_tasks)
        known = spec.instruction_tokens if self._seen[task] else 0
        self._seen[task] = True
        spans = [
            (self._task_span[task], spec.instruction_tokens),
            (next(self.span), spec.document.sample(self.rng)),
        ]
        return spans, known


@dataclass(frozen=True, slots=True)
class LongContextWorkload:
    arrivals: Arrivals = field(default_factory=lambda: Arrivals("poisson", rate_per_s=0.5))
    prompt: Lengths = field(default_factory=lambda: Lengths(20000, 60000, 1024, 120000))
    question: Lengths = field(default_factory=lambda: Lengths(60, 200))
    output: Lengths = field(default_factory=lambda: Lengths(300, 1000))
    questions_per_document: float = 3.0
    open_documents: int = 8
    model: str | None = None

    name = "longctx"

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> ScheduledRun:
        return _LongContextRun(self, block_size, seed, duration_s, rate_scale)


class _LongContextRun(OpenLoopRun):
    def __init__(
        self,
        spec: LongContextWorkload,
        block_size: int,
        seed: int,
        duration_s: float,
        scale: float,
    ) -> None:
        super().__init__(
            "longctx", spec.arrivals, seed, duration_s, scale, block_size, spec.output, spec.model
        )
        assert spec.questions_per_document >= 1, "questions_per_document must be >= 1"
        self.spec = spec
        self._documents: deque[tuple[int, int]] = deque(maxlen=max(1, spec.open_documents))

    def content(self) -> tuple[list[tuple[int, int]], int]:
        spec = self.spec
        rng = self.rng
        question = spec.question.sample(rng)
        if self._documents and rng.random() >= 1.0 / spec.questions_per_document:
            document = self._documents[rng.randrange(len(self._documents))]
            known = document[1]
        else:
            document = (next(self.span), max(spec.prompt.sample(rng) - question, 1))
            self._documents.append(document)
            known = 0
        return [document, (next(self.span), question)], known


@dataclass(frozen=True, slots=True)
class SharedPrefixWorkload:
    arrivals: Arrivals = field(default_factory=lambda: Arrivals("poisson", rate_per_s=4.0))
    num_groups: int = 16
    prefix_tokens: int = 4000
    suffix: Lengths = field(default_factory=lambda: Lengths(200, 800))
    output: Lengths = field(default_factory=lambda: Lengths(200, 600))
    model: str | None = None

    name = "shared-prefix"

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> ScheduledRun:
        return _SharedPrefixRun(self, block_size, seed, duration_s, rate_scale)


class _SharedPrefixRun(OpenLoopRun):
    def __init__(
        self,
        spec: SharedPrefixWorkload,
        block_size: int,
        seed: int,
        duration_s: float,
        scale: float,
    ) -> None:
        super().__init__(
            "shared-prefix",
            spec.arrivals,
            seed,
            duration_s,
            scale,
            block_size,
            spec.output,
            spec.model,
        )
        self.spec = spec
        self._group_span = [next(self.span) for _ in range(spec.num_groups)]
        self._seen = [False] * spec.num_groups

    def content(self) -> tuple[list[tuple[int, int]], int]:
        spec = self.spec
        group = self.rng.randrange(spec.num_groups)
        known = spec.prefix_tokens if self._seen[group] else 0
        self._seen[group] = True
        spans = [
            (self._group_span[group], spec.prefix_tokens),
            (next(self.span), spec.suffix.sample(self.rng)),
        ]
        return spans, known


@dataclass(frozen=True, slots=True)
class FixedWorkload:
    concurrency: int = 16
    input_tokens: int = 1024
    output_tokens: int = 256
    think_time_s: float = 0.0
    model: str | None = None

    name = "fixed"

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> ScheduledRun:
        return _FixedRun(self, block_size, seed, duration_s, rate_scale)


class _FixedRun(ScheduledRun):
    def __init__(
        self, spec: FixedWorkload, block_size: int, seed: int, duration_s: float, scale: float
    ) -> None:
        super().__init__("fixed", duration_s)
        assert spec.input_tokens > 0 and spec.output_tokens > 0, "lengths must be positive"
        self.spec = spec
        self.block_size = block_size
        self.reaction_delay_s = spec.think_time_s
        self._rng = random.Random(f"fixed:{seed}")
        for _ in range(max(1, round(spec.concurrency * scale))):
            self.schedule(0.0, self._send)

    def _send(self, request_id: str, at_s: float) -> WorkRequest:
        # NOTE: random prompts share nothing, so their blocks are left unhashed: the engine
        # behaves the same (nothing could hit) and a long run skips the hashing.
        spec = self.spec
        return WorkRequest(
            request_id, at_s, spec.input_tokens, spec.output_tokens, [], 0, 0, None, spec.model
        )

    def on_complete(self, request: WorkRequest, finish_s: float, ok: bool = True) -> None:
        if not ok:
            return  # NOTE: a client whose request was refused stops, or it would retry forever
        spec = self.spec
        think_s = sample_think_s(self._rng, spec.think_time_s, spec.think_time_s)
        self.schedule(finish_s + think_s, self._send)
