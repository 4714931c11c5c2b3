"""A pool of replicas whose in-flight counts follow a policy's decisions, for the policy tests."""

from __future__ import annotations

from collections.abc import Sequence

from inhouse.hashing import hash_spans
from inhouse.routing import Policy, PolicyContext, ReplicaView, RequestView, make_policy

BS = 16


class Pool:
    """Four replicas whose in-flight counts follow the policy's decisions, like a router's."""

    def __init__(self, policy: str, n: int = 4, **params: object) -> None:
        self.policy: Policy = make_policy(policy, PolicyContext(n, BS, 100_000), params)
        self.inflight = [0] * n
        self.healthy = [True] * n
        self.kv = [0.0] * n
        self.cached: list[int] | None = None

    def views(self) -> list[ReplicaView]:
        def counter(i: int):
            return lambda hashes: min(self.cached[i], len(hashes))  # type: ignore[index]

        return [
            ReplicaView(
                i,
                self.inflight[i],
                0,
                self.kv[i],
                self.healthy[i],
                counter(i) if self.cached is not None else None,
            )
            for i in range(len(self.inflight))
        ]

    def send(self, request: RequestView) -> int:
        decision = self.policy.choose(request, self.views())
        assert decision is not None
        self.policy.observe(request, decision)
        self.inflight[decision.replica] += 1
        return decision.replica

    def finish(self, request_id: str, replica: int) -> None:
        self.policy.on_finish(request_id)
        self.inflight[replica] -= 1


def request(rid: str, spans: Sequence[tuple[int, int]], session: str | None = None) -> RequestView:
    hashes = hash_spans(spans, BS)
    return RequestView(rid, sum(n for _, n in spans), hashes, session)


SYSTEM = (1000, 6000)
