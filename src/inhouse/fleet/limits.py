"""How much one simulated run may send, and the error a run headed past it stops with."""

from __future__ import annotations

import math

from inhouse.errors import SpecError

# The most requests one run may send. A run keeps every request's record and the engines'
# state (about 6 KB a request) and takes about 1 ms of wall time a request on the project's
# 2-core VM (docs/simulate.md): 1,000,000 is some 6 GB and 15 to 20 minutes. Past it a run is a
# typo (`--duration 1e12`), not a question; an hour at 250 requests/s still fits.
MAX_SIMULATED_REQUESTS = 1_000_000
# A closed loop's rate shows only as it runs: every this many requests, a run projects its
# count so far over its whole duration and stops once that passes twice its limit (twice: the
# first minutes of a loop can run faster than the rest; past the limit itself it stops anyway).
PROJECT_EVERY = 10_000


class TooManyRequestsError(SpecError):
    """A run sent more requests than it was allowed (`max_requests`): a closed loop, whose rate
    is known only once it runs. Carries the figures for the shell to word with its flags."""

    def __init__(self, max_requests: int, num_sent: int, at_s: float, duration_s: float) -> None:
        self.max_requests = max_requests
        self.expected = num_sent * duration_s / at_s if at_s > 0 else math.inf
        super().__init__(
            f"the run sent {num_sent:,} requests in its first {at_s:,.4g} s of "
            f"{duration_s:,.6g} s of arrivals, about {self.expected:,.0f} in all at that rate, "
            f"more than the {max_requests:,} a run may"
        )
