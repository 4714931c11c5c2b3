"""Policies as filters → scorers → picker (the llm-d inference scheduler's shape).

A *filter* narrows the candidate replicas (healthy ones, ones under a load ceiling); it never
returns an empty list when it was given a non-empty one. A *scorer* gives each candidate a score
in 0..1, higher is better. The *picker* takes the weighted sum and the best candidate; ties go
to the first tied candidate at or after a rotating offset, so equal replicas share traffic
instead of the lowest index taking it all.

The plugins live one per file in `filters/`, `scorers/` and `pickers/`, each with a header
saying what it scores or keeps, from which signal, at what cost; `policies/` composes them.

A policy chooses; it never mutates state in `choose`. What it learns from a decision (an index
entry, an in-flight estimate, the round-robin position) it records in `observe`, called once the
request was actually dispatched, and forgets in `on_first_token` / `on_finish`. The live gateway
calls the same four methods from its event loop, and `forget_replica` when a replica's index
names another engine from then on (a scaled pool's replicas come and go; the count stays).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from inhouse.routing.pickers.max_score import pick_max_score
from inhouse.routing.view import Decision, ReplicaView, RequestView


@dataclass(frozen=True, slots=True)
class PolicyContext:
    """What a policy may know about its pool when it is built.

    `kv_blocks_per_replica` sizes bounded indexes like the engine's own cache
    (as llm-d derives `lruCapacityPerServer` from engine metrics).
    """

    num_replicas: int
    block_size: int = 16
    kv_blocks_per_replica: int = 65536


class Filter(Protocol):
    def __call__(
        self, request: RequestView, candidates: list[ReplicaView]
    ) -> list[ReplicaView]: ...


class Scorer(Protocol):
    def __call__(
        self, request: RequestView, candidates: list[ReplicaView], prepared: object
    ) -> list[float]: ...


class Policy:
    """Base: default no-op hooks and the filters → scorers → picker pipeline.

    Subclasses set `filters` and `scorers` (pairs of scorer and weight) and may override
    `prepare`, whose result is handed to every scorer so that shared work (an index lookup)
    happens once per decision.
    """

    name = "policy"

    def __init__(self, context: PolicyContext) -> None:
        self.context = context
        self.filters: tuple[Filter, ...] = ()
        self.scorers: tuple[tuple[Scorer, float], ...] = ()
        self._num_observed = 0

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision | None:
        """The replica for `request`, or None when no replica is healthy. One candidate left
        needs no scores: the picker could only take it."""
        candidates = [view for view in replicas if view.is_healthy]
        for keep in self.filters:
            if len(candidates) <= 1:
                break
            kept = keep(request, candidates)
            assert kept, f"{self.name}: a filter emptied a non-empty candidate list"
            candidates = kept
        if not candidates:
            return None
        prepared = self.prepare(request, candidates)
        if len(candidates) == 1:
            return self.explain(request, candidates, prepared, 0)
        totals: list[float] | None = None
        for scorer, weight in self.scorers:
            scores = scorer(request, candidates, prepared)
            assert min(scores) >= -1e-9 and max(scores) <= 1 + 1e-9, (
                f"{self.name}: a score outside 0..1 in {scores}"
            )
            if totals is None:  # `0.0 +`: the same sums as adding to a list of zeros
                totals = [0.0 + weight * score for score in scores]
            else:
                totals = [t + weight * score for t, score in zip(totals, scores, strict=True)]
        best = self.pick(totals or [0.0] * len(candidates))
        return self.explain(request, candidates, prepared, best)

    def prepare(self, request: RequestView, candidates: list[ReplicaView]) -> object:
        return None

    def pick(self, totals: list[float]) -> int:
        """Position of the best total; ties rotate with the number of decisions observed."""
        return pick_max_score(totals, self._num_observed)

    def explain(
        self, request: RequestView, candidates: list[ReplicaView], prepared: object, best: int
    ) -> Decision:
        return Decision(candidates[best].index, self.name)

    def observe(self, request: RequestView, decision: Decision) -> None:
        """The request was dispatched as decided."""
        self._num_observed += 1

    def on_first_token(self, request_id: str) -> None:
        """The request's first token came back (its prefill is done)."""

    def on_finish(self, request_id: str) -> None:
        """The request finished, failed or was aborted."""

    def forget_replica(self, index: int) -> None:
        """Replica `index` is another engine now (a scaled pool's slot got a new address, or
        lost its own; or the replica rejoins after it left, maybe restarted): nothing learnt
        about the engine there before may carry over."""
