"""Policy `session`: session affinity, else as `least_loaded`."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from inhouse.routing.framework import Policy, PolicyContext
from inhouse.routing.scorers.inflight import least_inflight_score
from inhouse.routing.view import Decision, ReplicaView, RequestView


class SessionAffinity(Policy):
    """`session`: every request of a session goes to the replica its first request went to.

    Algorithm: a table from session key to replica, filled in `observe`. A request whose
    session is bound to a healthy replica goes there; a request without a session key, or
    whose replica is down, is placed as `least_loaded` would (and, if it has a key, bound to
    the new replica). A binding made before `forget_replica(index)` (another engine took that
    index) no longer holds: each binding keeps its replica's generation, compared on lookup
    (no scan of the table). Parameters:

    * `max_sessions` (default 1,000,000): the table's size; the least recently used binding is
      forgotten beyond it, so memory stays bounded.
    """

    name = "session"

    def __init__(self, context: PolicyContext, max_sessions: int = 1_000_000) -> None:
        super().__init__(context)
        assert max_sessions > 0, "max_sessions must be positive"
        self.scorers = ((least_inflight_score, 1.0),)
        self.max_sessions = max_sessions
        # session key -> (replica, the replica's generation when bound)
        self._replica_of: OrderedDict[str, tuple[int, int]] = OrderedDict()
        self._generations = [0] * context.num_replicas

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision | None:
        key = request.session_key
        if key is not None:
            entry = self._replica_of.get(key)
            if entry is not None and entry[1] == self._generations[entry[0]]:
                bound = entry[0]
                for view in replicas:
                    if view.index == bound and view.is_healthy:
                        return Decision(bound, "session")
        decision = super().choose(request, replicas)
        if decision is None:
            return None
        return Decision(decision.replica, "least_loaded")

    def observe(self, request: RequestView, decision: Decision) -> None:
        super().observe(request, decision)
        key = request.session_key
        if key is None:
            return
        table = self._replica_of
        table[key] = (decision.replica, self._generations[decision.replica])
        table.move_to_end(key)
        if len(table) > self.max_sessions:
            table.popitem(last=False)

    def forget_replica(self, index: int) -> None:
        self._generations[index] += 1

    @property
    def num_sessions(self) -> int:
        return len(self._replica_of)
