"""Policies as filters → scorers → picker (the llm-d inference scheduler's shape).

A *filter* narrows the candidate replicas (healthy ones, ones under a load ceiling); it never
returns an empty list when it was given a non-empty one. A *scorer* gives each candidate a score
in 0..1, higher is better. The *picker* takes the weighted sum and the best candidate; ties go
to the first tied candidate at or after a rotating offset, so equal replicas share traffic
instead of the lowest index taking it all.

A policy chooses; it never mutates state in `choose`. What it learns from a decision (an index
entry, an in-flight estimate, the round-robin position) it records in `observe`, called once the
request was actually dispatched, and forgets in `on_first_token` / `on_finish`. The live gateway
calls the same four methods from its event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

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
        """The replica for `request`, or None when no replica is healthy."""
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
        totals = [0.0] * len(candidates)
        for scorer, weight in self.scorers:
            scores = scorer(request, candidates, prepared)
            assert min(scores) >= -1e-9 and max(scores) <= 1 + 1e-9, (
                f"{self.name}: a score outside 0..1 in {scores}"
            )
            totals = [total + weight * score for total, score in zip(totals, scores, strict=True)]
        best = self.pick(totals)
        return self.explain(request, candidates, prepared, best)

    def prepare(self, request: RequestView, candidates: list[ReplicaView]) -> object:
        return None

    def pick(self, totals: list[float]) -> int:
        """Position of the best total; ties rotate with the number of decisions observed."""
        top = max(totals)
        n = len(totals)
        start = self._num_observed % n
        for k in range(n):
            i = (start + k) % n
            if totals[i] >= top - 1e-12:
                return i
        raise AssertionError("unreachable: some total equals the maximum")

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


def least_inflight_score(
    request: RequestView, candidates: list[ReplicaView], prepared: object
) -> list[float]:
    """1 for an idle replica, falling linearly with in-flight requests to 0 at 1 + the most."""
    most = max(view.num_inflight for view in candidates) + 1
    return [1.0 - view.num_inflight / most for view in candidates]


def keep_under_load_ceiling(load_factor: float, slack: float) -> Filter:
    """Bounded load (consistent hashing with bounded loads, as SGLang's `prefix_hash`): keep
    replicas that would stay at or under `max(load_factor * mean, mean + slack)` in-flight
    requests after taking this one, the mean taken over the candidates after the dispatch. The
    least loaded replica always stays."""

    def keep(request: RequestView, candidates: list[ReplicaView]) -> list[ReplicaView]:
        loads = [view.num_inflight for view in candidates]
        mean = (sum(loads) + 1) / len(loads)
        ceiling = max(load_factor * mean, mean + slack, min(loads) + 1)
        return [view for view in candidates if view.num_inflight + 1 <= ceiling + 1e-9]

    return keep


def keep_kv_below(ceiling: float) -> Filter:
    """Keep replicas whose KV usage is below `ceiling`; all of them if none is."""

    def keep(request: RequestView, candidates: list[ReplicaView]) -> list[ReplicaView]:
        kept = [view for view in candidates if view.kv_usage < ceiling]
        return kept or candidates

    return keep
