"""kill-replica: SIGKILL one chat replica under planned-peak agent load, restart it; then SIGTERM
it (graceful drain) and restart it again. One load runs through both phases.

Timeline (quick / full, seconds): warm-up 8 / 30; SIGKILL; degraded window 15 / 60 after the
gateway's health window; restart with a 4 / 20 s model load; settle 5 / 20; SIGTERM; drain
until the process exits; restart; settle.
"""

from __future__ import annotations

import asyncio
import signal
import time

from inhouse.bench.metrics import RequestResult
from inhouse.drill.context import DrillContext
from inhouse.drill.load import BEFORE, MID, Load, count, cut_at, p95_ttft_ms, samples
from inhouse.drill.probes import engine_value, loaded_at, wait_healthy
from inhouse.drill.receiver import Notified
from inhouse.drill.stack import LOAD_TENANT
from inhouse.drill.watch import RouteWatch
from inhouse.render.alerts_replicas import REPLICA_DOWN, REPLICA_DOWN_SEVERITY
from inhouse.spec.gateway import HealthSpec, parse_gateway

# One replica lost is a ticket in the rendered rules (a rollout takes each replica out for its
# model load; the pool runs degraded by design): the drill expects it as render words it.
ALERT = REPLICA_DOWN
QUICK_OUTPUT = "120:400"  # shorter answers in --quick, so the drain phase ends in seconds


def health_window_s(ctx: DrillContext) -> float:
    """The stack's `dead_window_s`."""
    return dead_window_s(parse_gateway(ctx.stack.stack.gateway).health)


def dead_window_s(h: HealthSpec) -> float:
    """How long the gateway may keep routing to a dead replica: `unhealthy_after` probes
    `interval_s` apart, the last one waiting `timeout_s`."""
    return h.interval_s * h.unhealthy_after + h.timeout_s


def unobserved(index: str, window: float) -> str:
    return (
        f"not observed: no sample of the gateway's /metrics showed replica {index} later "
        f"than {window + 0.5:g} s after"
    )


def drain_window_s(h: HealthSpec, drained_s: float | None) -> tuple[float, str]:
    """How long the gateway may keep routing to a draining replica, and why: one probe (the
    next comes within `interval_s`, its 503 within `timeout_s`: a replica that answers
    unhealthy leaves at once) while the replica still runs; the dead replica's window when it
    exited (after `drained_s`; None: not yet) before that probe was sure to be answered."""
    one_probe = h.interval_s + h.timeout_s
    if drained_s is None or drained_s >= one_probe:
        return one_probe, "one probe, which it answers 503"
    return dead_window_s(h), f"the dead replica's window: it exited {drained_s:.1f} s after SIGTERM"


async def run(ctx: DrillContext) -> None:
    p, res, quick = ctx.profile, ctx.result, ctx.quick
    warm, degraded, settle, load_time = (8.0, 15.0, 5.0, 4.0) if quick else (30.0, 60.0, 20.0, 20.0)
    names = [n for n, r in ctx.stack.replicas.items() if r.pool == p.pool]
    victim = ctx.stack.replicas[names[-1]]
    index = str(victim.index)
    window = health_window_s(ctx)
    params = {"sessions": p.peak_sessions, "model": p.model, **p.agent_params}
    if quick:
        params.setdefault("output", QUICK_OUTPUT)
    res.notes.append(f"load: agent {params}; profile: {p.source}")
    res.notes.append(f"gateway health window {window:g} s; victim {victim.name}")
    load = Load(ctx.gateway, ctx.key(LOAD_TENANT), "agent", params, 3600, model=p.model).start()
    watch = RouteWatch(ctx.stack.gateway_metrics_url, p.pool).start()
    try:
        await ctx.sleep(warm)
        await _wait_busy(victim.url, 15.0)
        t_kill, running = await _kill(ctx, victim.name, victim.url)
        fired = await ctx.wait_alert(
            ALERT, {"pod": victim.name}, ctx.alert_timeout_s(30.0), since=t_kill
        )
        await ctx.sleep(max(0.0, t_kill + window + degraded - time.perf_counter()))
        t_restart = time.perf_counter()
        ctx.stack.start_replica(victim.name, load_time_s=load_time)
        ctx.event(f"restart {victim.name} (model load {load_time:g} s)")
        t_ready = await _wait_loaded(ctx, victim.url, victim.admin_url, load_time + 60)
        ctx.event(f"{victim.name} /health 200")
        resolved = await ctx.wait_resolved(fired, 30.0) if fired else None
        ctx.record_alert(ALERT, fired, resolved)
        await ctx.sleep(settle)
        await _wait_busy(victim.url, 15.0)
        t_term, t_exit, code, running_at_term = await _drain(ctx, victim.name, victim.url)
        ctx.stack.start_replica(victim.name, load_time_s=load_time)
        ctx.event(f"restart {victim.name} (model load {load_time:g} s)")
        t_back = await _wait_loaded(ctx, victim.url, victim.admin_url, load_time + 60)
        ctx.event(f"{victim.name} back after drain")
        await ctx.sleep(settle)
    finally:
        results = await load.finish()
        await watch.stop()
    res.samples = samples(results, ctx.t0)
    _check_kill(ctx, results, watch, index, (t_kill, t_restart), window, fired, running)
    _check_rejoin(ctx, watch, index, (t_kill, t_restart), t_ready, "after SIGKILL")
    degraded_p95 = p95_ttft_ms(results, t_kill + window, t_restart)
    res.check(
        "degraded p95 TTFT",
        f"<= {p.degraded_ttft_slo_ms:g} ms (the degraded-mode SLO)",
        "no request in the degraded window" if degraded_p95 is None else f"{degraded_p95:.0f} ms",
        degraded_p95 is not None and degraded_p95 <= p.degraded_ttft_slo_ms,
    )
    health = parse_gateway(ctx.stack.stack.gateway).health
    drain_window = drain_window_s(health, None if t_exit is None else t_exit - t_term)
    _check_drain(ctx, results, watch, index, t_term, t_exit, code, drain_window, running_at_term)
    _check_rejoin(ctx, watch, index, (t_term, t_exit or t_term), t_back, "after the drain")


async def _wait_loaded(
    ctx: DrillContext, url: str, admin_url: str, timeout_s: float
) -> float | None:
    """When the restarted replica turned /health 200, by its own clock: the drill's probe sees
    it later, and under load much later, while the gateway (probing on its own) may rightly
    route to it before the drill looks. None if it never did, or does not say."""
    seen = await wait_healthy(url, timeout_s)
    if seen is None:
        return None
    at = await loaded_at(admin_url)
    if at is None:
        ctx.result.notes.append(f"{admin_url}/loaded did not say when /health turned 200")
        return None
    ctx.result.notes.append(
        f"{url}/health 200 at {at - ctx.t0:.2f} s by the replica's clock; the drill's own "
        f"probe saw it {seen - at:.2f} s later"
    )
    return at


async def _wait_busy(url: str, timeout_s: float) -> None:
    """Wait (up to `timeout_s`) until the replica has a request running: a fault with nothing
    in flight would test nothing."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        if (await engine_value(url, "vllm:num_requests_running") or 0) >= 1:
            return
        await asyncio.sleep(0.2)


async def _kill(ctx: DrillContext, name: str, url: str) -> tuple[float, float | None]:
    """SIGKILL the replica: when, and how many requests it was running (None: unknown)."""
    running = await engine_value(url, "vllm:num_requests_running")
    ctx.stack.signal(name, signal.SIGKILL)
    t = time.perf_counter()
    ctx.event(f"SIGKILL {name} ({running or 0:.0f} requests running on it)")
    ctx.result.notes.append(f"requests running on {name} at SIGKILL: {running}")
    return t, running


async def _drain(
    ctx: DrillContext, name: str, url: str
) -> tuple[float, float | None, int | None, float | None]:
    """SIGTERM the replica and wait for it to exit: when, when it exited, its exit code, and
    the requests it was running at SIGTERM (None: not read)."""
    running = await engine_value(url, "vllm:num_requests_running")
    ctx.stack.signal(name, signal.SIGTERM)
    t_term = time.perf_counter()
    ctx.event(f"SIGTERM {name} (drain, {running or 0:.0f} requests running on it)")
    pool = ctx.stack.pool_of(name)
    code = await _wait_exit(ctx, name, pool.knobs.shutdown_timeout_s + 15.0)
    t_exit = time.perf_counter() if code is not None else None
    ctx.event(f"{name} exited ({code})")
    return t_term, t_exit, code, running


async def _wait_exit(ctx: DrillContext, name: str, timeout_s: float) -> int | None:
    return await asyncio.to_thread(ctx.stack.wait_exit, name, timeout_s)


def _check_kill(
    ctx: DrillContext,
    results: list[RequestResult],
    watch: RouteWatch,
    index: str,
    span: tuple[float, float],
    window: float,
    fired: Notified | None,
    running: float | None,
) -> None:
    """`running`: the requests the replica was running at SIGKILL (None: not read)."""
    t_kill, t_restart = span
    res = ctx.result
    before = count(results, BEFORE)
    res.check(
        "no failure before the first token",
        "0 requests fail before streaming (the gateway retries them on the survivor)",
        f"{before} failed before streaming",
        before == 0,
    )
    cut = [
        r
        for r in results
        if r.outcome.num_chunks > 0
        and not r.outcome.error.startswith("error event")
        and not r.outcome.success
    ]
    killed = count(results, MID)
    # NOTE: a kill with nothing running cut nothing, and "none without an error event" held
    # without a stream to show it.
    busy = running is not None and running >= 1
    res.check(
        "streams cut by SIGKILL end with an error event",
        "the replica was running requests; every stream broken by the kill ends with `data: "
        '{"error"...}` and [DONE]',
        f"{killed} broken streams, {len(cut)} of them without an error event"
        + ("" if busy else f"; {running or 0:.0f} requests running on it at SIGKILL"),
        busy and len(cut) == 0,
    )
    last = watch.last_routed(index, t_kill + 0.5, t_restart)
    late = 0.0 if last is None else last - t_kill
    seen = watch.observed(index, t_kill + window + 0.5, t_restart)
    res.check(
        "gateway stops routing to the killed replica",
        f"no routing decision to it later than {window:g} s (its health window) after the kill",
        ("none after the kill" if last is None else f"last one {late:.1f} s after the kill")
        + ("" if seen else f"; {unobserved(index, window)}"),
        seen and (last is None or late <= window + 0.5),
    )
    ctx.check_routed("replica-down alert", ALERT, fired, REPLICA_DOWN_SEVERITY)


def _check_rejoin(
    ctx: DrillContext,
    watch: RouteWatch,
    index: str,
    span: tuple[float, float],
    t_ready: float | None,
    phase: str,
) -> None:
    """`span`: the fault (SIGKILL, SIGTERM) and the moment the replica was gone (restarted,
    exited); `t_ready`: when it turned /health 200, by its own clock. A routing decision is
    early when the gateway made it after it had taken the replica out (its own health gauge,
    0) or after it was gone, whichever is later, and before `t_ready`. Before the gateway
    takes a dead replica out it may route there within its health window: the kill and drain
    checks bound that. A decision a scrape shows is certain: a sample's time is when its
    scrape came back, after the gateway counted what it shows."""
    res = ctx.result
    if t_ready is None:
        res.check(f"rejoin {phase}", "the replica's /health turns 200", "never healthy", False)
        return
    t_fault, t_gone = span
    left = watch.first_unhealthy(index, t_fault)
    early = watch.routed_count(index, max(t_gone, left if left is not None else t_gone), t_ready)
    joined = watch.first_healthy(index, t_ready)
    res.check(
        f"rejoins only once healthy ({phase})",
        "no request routed to it before /health is 200; the gateway takes it back after",
        f"{early:.0f} routed before ready"
        + ("; the gateway never took it out" if left is None else "")
        + "; back in the gateway "
        + ("never" if joined is None else f"{joined - t_ready:+.1f} s after ready"),
        early == 0 and joined is not None and left is not None,
    )


def _check_drain(
    ctx: DrillContext,
    results: list[RequestResult],
    watch: RouteWatch,
    index: str,
    t_term: float,
    t_exit: float | None,
    code: int | None,
    drain_window: tuple[float, str],
    running: float | None,
) -> None:
    """`drain_window`: how long after SIGTERM the gateway may route there, and why
    (`drain_window_s`); `running`: the requests the replica was running at SIGTERM."""
    res = ctx.result
    window, why = drain_window
    cut_after = cut_at(results, t_term)
    res.check(
        "drain: streams in flight complete",
        "the replica was running requests; every request in flight at SIGTERM completes",
        f"{running or 0:.0f} running on it at SIGTERM; {len(cut_after)} failed or cut",
        running is not None and running >= 1 and len(cut_after) == 0,
    )
    res.check(
        "drain: the replica exits cleanly",
        "exit code 0 within shutdown_timeout_s",
        f"exit code {code}",
        code == 0,
    )
    # Until the gateway takes it out, exited or not (a quick drain ends before the health
    # window does); the rejoin check counts what comes after.
    left = watch.first_unhealthy(index, t_term)
    until = max(t_exit or float("inf"), left if left is not None else float("inf"))
    last = watch.last_routed(index, t_term + 0.5, until + 1e-6)  # the sample at `left` too
    res.check(
        "drain: no new requests to the draining replica",
        f"no routing decision to it later than {window:g} s after SIGTERM ({why})",
        "none after SIGTERM" if last is None else f"last one {last - t_term:.1f} s after",
        last is None or last - t_term <= window + 0.5,
    )
    res.check(
        "drain: the gateway takes the draining replica out",
        f"its health gauge at 0 within {window:g} s of SIGTERM ({why})",
        "never" if left is None else f"{left - t_term:.1f} s after SIGTERM",
        left is not None and left - t_term <= window + 0.5,
    )
