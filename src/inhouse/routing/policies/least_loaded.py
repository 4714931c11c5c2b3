"""Policy `least_loaded`: the `inflight` scorer alone, ties rotating."""

from __future__ import annotations

from inhouse.routing.framework import Policy, PolicyContext
from inhouse.routing.scorers.inflight import least_inflight_score


class LeastLoaded(Policy):
    """`least_loaded`: the healthy replica with the fewest in-flight requests.

    Algorithm: one scorer, `1 - inflight / (max_inflight + 1)`; ties rotate. In-flight counts
    are the router's own (incremented at dispatch), the cure for the hot-spotting every router
    that counted only after the decision or from stale scrapes suffered. No parameters.
    """

    name = "least_loaded"

    def __init__(self, context: PolicyContext) -> None:
        super().__init__(context)
        self.scorers = ((least_inflight_score, 1.0),)
