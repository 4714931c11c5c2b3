"""Policy `round_robin`: the healthy replicas in turn, whatever their load or cache."""

from __future__ import annotations

from collections.abc import Sequence

from inhouse.routing.framework import Policy
from inhouse.routing.view import Decision, ReplicaView, RequestView


class RoundRobin(Policy):
    """`round_robin`: the healthy replicas in turn, whatever their load or cache.

    Algorithm: the *k*-th dispatched request goes to healthy candidate `k mod n`. No
    parameters. The position advances in `observe`, so asking twice gives the same answer.
    """

    name = "round_robin"

    def choose(self, request: RequestView, replicas: Sequence[ReplicaView]) -> Decision | None:
        healthy = [view for view in replicas if view.is_healthy]
        if not healthy:
            return None
        return Decision(healthy[self._num_observed % len(healthy)].index, self.name)
