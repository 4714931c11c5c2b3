"""Is the client, not the server, the bottleneck? Send lag, loop lag, CPU, achieved rate.

A run is flagged when any of these holds (bench-metrics.md §9.3 uses 10 ms of send lag):

* send lag (t_send − t_sched) p99 above `SEND_LAG_LIMIT_MS`, when no `--max-concurrency`
  gate holds requests back on purpose;
* event-loop lag p99 above `LOOP_LAG_LIMIT_MS` in any client process;
* any client process above `CPU_LIMIT` of a core;
* achieved send rate below `RATE_LIMIT` of the scheduled rate.

A flagged run still reports every number, with `client_bottleneck: true` and the reasons, and
the CLI prints a banner: its latencies describe the client at least in part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from inhouse.bench.metrics import RequestResult

SEND_LAG_LIMIT_MS = 10.0
LOOP_LAG_LIMIT_MS = 10.0
CPU_LIMIT = 0.9
RATE_LIMIT = 0.95


def assess_client(
    results: Sequence[RequestResult],
    health: Sequence[dict[str, Any]],
    *,
    gated: bool,
    requested_rate: float | None,
    num_workers: int,
) -> dict[str, Any]:
    lag_ms = np.asarray([r.queue_s for r in results] or [0.0]) * 1000.0
    sched = sorted(r.outcome.t_sched for r in results)
    sends = sorted(r.outcome.t_send for r in results)
    scheduled_rate = achieved_rate = None
    if len(results) > 1 and sched[-1] > sched[0] and sends[-1] > sends[0]:
        scheduled_rate = (len(sched) - 1) / (sched[-1] - sched[0])
        achieved_rate = (len(sends) - 1) / (sends[-1] - sends[0])
    out: dict[str, Any] = {
        "send_lag_p50_ms": float(np.percentile(lag_ms, 50)),
        "send_lag_p99_ms": float(np.percentile(lag_ms, 99)),
        "send_lag_max_ms": float(np.max(lag_ms)),
        "requested_rate": requested_rate,
        "scheduled_rate": scheduled_rate,
        "achieved_rate": achieved_rate,
        "workers": num_workers,
        "processes": list(health),
    }
    reasons = []
    if not gated and out["send_lag_p99_ms"] > SEND_LAG_LIMIT_MS:
        reasons.append(f"send lag p99 {out['send_lag_p99_ms']:.1f} ms > {SEND_LAG_LIMIT_MS:g} ms")
    for proc in health:
        if proc.get("loop_lag_p99_ms", 0.0) > LOOP_LAG_LIMIT_MS:
            reasons.append(
                f"{proc['process']}: event-loop lag p99 {proc['loop_lag_p99_ms']:.1f} ms"
            )
        if proc.get("cpu_fraction", 0.0) > CPU_LIMIT:
            reasons.append(f"{proc['process']}: CPU {100 * proc['cpu_fraction']:.0f}% of a core")
    if scheduled_rate and achieved_rate and achieved_rate < RATE_LIMIT * scheduled_rate:
        reasons.append(
            f"achieved {achieved_rate:.1f} req/s of {scheduled_rate:.1f} req/s scheduled"
        )
    out["client_bottleneck"] = bool(reasons)
    out["reasons"] = reasons
    return out


def banner(assessment: dict[str, Any]) -> str:
    if not assessment.get("client_bottleneck"):
        return ""
    lines = [
        "!" * 78,
        "!! WARNING: THE BENCHMARK CLIENT WAS A BOTTLENECK; latencies include client delay.",
        *(f"!!   - {reason}" for reason in assessment["reasons"]),
        "!! Use --workers N (more client processes), a lower rate, or a bigger client host.",
        "!" * 78,
    ]
    return "\n".join(lines)
