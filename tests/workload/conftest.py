from __future__ import annotations

import heapq
import itertools

from inhouse.workload import WorkloadRun, WorkRequest


def drive(run: WorkloadRun, service_s: float = 5.0, limit: int = 100_000) -> list[WorkRequest]:
    """Serve every request in exactly `service_s` and return them in arrival order."""
    out: list[WorkRequest] = []
    busy: list[tuple[float, int, WorkRequest]] = []
    seq = itertools.count()
    while len(out) < limit:
        arrival = run.next_arrival_s()
        finish = busy[0][0] if busy else float("inf")
        if arrival == finish == float("inf"):
            break
        if arrival <= finish:
            request = run.pop_arrival()
            out.append(request)
            heapq.heappush(busy, (request.arrival_s + service_s, next(seq), request))
        else:
            done_s, _, request = heapq.heappop(busy)
            run.on_complete(request, done_s)
    return out
