"""How much a simulation may be asked to do: the check `inhouse simulate` and `inhouse bench
--simulate` make before they start (and `simulate_stack(max_requests=...)` as one runs)."""

from __future__ import annotations

from typing import Any

from inhouse.errors import SpecError
from inhouse.fleet.records import FleetResult
from inhouse.fleet.simulator import MAX_SIMULATED_REQUESTS, TooManyRequestsError, simulate_stack
from inhouse.spec.stack import StackSpec
from inhouse.workload import Workload
from inhouse.workload.traces import TraceWorkload
from inhouse.workload.volume import MAX_CLIENTS, expected_requests, num_clients


def refuse_a_run_too_large(workload: Workload, duration_s: float, rate_scale: float) -> None:
    """Refuse, before it starts, a run whose expected requests pass what a run may send (an open
    loop: rate x --rate-scale x --duration), or a closed loop with more clients than a run may
    build (sessions or concurrency x --rate-scale). A closed loop's rate shows only as it runs:
    `simulate_stack(max_requests=...)` stops it there."""
    expected = expected_requests(workload, duration_s, rate_scale)
    if expected is not None and expected > MAX_SIMULATED_REQUESTS:
        if isinstance(workload, TraceWorkload):
            how = f"{expected:,.0f} of the trace's rows arrive in it"
        else:
            rate = _rate_words(workload)
            how = f"about {expected:,.0f} requests: {rate} x {rate_scale:g} x {duration_s:g} s"
        raise SpecError(
            f"--duration {duration_s:g}, --rate-scale {rate_scale:g}: the run would send "
            f"{how}, more than the {MAX_SIMULATED_REQUESTS:,} a run may (each costs memory and "
            "time; docs/simulate.md, Limits). Shorten --duration or lower --rate-scale."
        )
    clients = num_clients(workload, rate_scale)
    if clients is not None and clients > MAX_CLIENTS:
        raise SpecError(
            f"--rate-scale {rate_scale:g}: the {workload.name} workload's clients x "
            f"{rate_scale:g} is {clients:,} clients, more than the {MAX_CLIENTS:,} a run may "
            "build; lower --rate-scale (or -W sessions= / -W concurrency=)."
        )


def _rate_words(workload: Workload) -> str:
    rate = getattr(workload, "session_rate_per_s", 0.0)
    if rate > 0:
        turns = (workload.min_turns + workload.max_turns) / 2  # type: ignore[attr-defined]
        return f"{rate:g} sessions/s x {turns:g} turns"
    return f"{workload.arrivals.rate_per_s:g} requests/s"  # type: ignore[attr-defined]


def simulate_within_limits(
    stack: StackSpec,
    workload: Workload,
    *,
    duration_s: float,
    rate_scale: float,
    fix: str,
    **options: Any,
) -> FleetResult:
    """`simulate_stack` stopped at what a run may send (a closed loop's rate shows only as it
    runs), the stop said as a `SpecError` naming the flags and `fix`."""
    try:
        return simulate_stack(
            stack,
            workload,
            duration_s=duration_s,
            rate_scale=rate_scale,
            max_requests=MAX_SIMULATED_REQUESTS,
            **options,
        )
    except TooManyRequestsError as exc:
        raise SpecError(
            f"--duration {duration_s:g}, --rate-scale {rate_scale:g}: {exc} "
            f"(docs/simulate.md, Limits); {fix}"
        ) from None
