"""ecc-dbe: a double-bit ECC error on one GPU of a busy replica; the page, the drain, and the
Kubernetes remediation.

The DCGM-compatible exporter raises `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` on the replica's first GPU.
When the page reaches the drill's receiver, the drill does what the rendered remediation does to
the pod on that GPU (`kubectl drain` evicts it: SIGTERM, the engine drains): it sends the
replica SIGTERM, and watches that no new request reaches it and its in-flight ones finish. The
cordon-and-drain commands for the same GPU are validated offline with kubectl.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from urllib.parse import urlsplit

from inhouse.drill.context import DrillContext
from inhouse.drill.drills.kill_replica import dead_window_s, drain_window_s, unobserved
from inhouse.drill.kubectl import check_command, kubectl_version
from inhouse.drill.load import Load, cut_at, samples
from inhouse.drill.probes import engine_value
from inhouse.drill.receiver import Notified
from inhouse.drill.remediation import ecc_remediation
from inhouse.drill.stack import LOAD_TENANT, NODE_NAME
from inhouse.drill.watch import RouteWatch
from inhouse.spec.gateway import parse_gateway

ALERT = "InhouseGPUDoubleBitECC"


async def run(ctx: DrillContext) -> None:
    p, res = ctx.profile, ctx.result
    warm = 6.0 if ctx.quick else 20.0
    victim = [r for r in ctx.stack.replicas.values() if r.pool == p.pool][-1]
    gpu = victim.gpus[0]
    params = {"sessions": p.peak_sessions, "model": p.model, "output": "120:400"}
    load = Load(ctx.gateway, ctx.key(LOAD_TENANT), "agent", params, 3600, model=p.model).start()
    watch = RouteWatch(ctx.stack.gateway_metrics_url, p.pool).start()
    t_drain: float | None = None
    t_exit: float | None = None
    code: int | None = None
    fired: Notified | None = None
    running: float | None = None
    try:
        await ctx.sleep(warm)
        for _ in range(50):  # a replica with work in flight, so the drain has something to keep
            if (await engine_value(victim.url, "vllm:num_requests_running") or 0) >= 1:
                break
            await asyncio.sleep(0.2)
        t_fault = time.perf_counter()
        await ctx.stack.dcgm_fault("ecc_dbe", {"gpu": gpu, "count": 1})
        ctx.event(f"ECC double-bit error on GPU {gpu} ({victim.name})")
        fired = await ctx.wait_alert(
            ALERT, {"gpu": str(gpu)}, ctx.alert_timeout_s(0.0), since=t_fault
        )
        if fired is not None:
            running = await engine_value(victim.url, "vllm:num_requests_running")
            t_drain = time.perf_counter()
            ctx.stack.signal(victim.name, signal.SIGTERM)
            ctx.event(f"page received: drain {victim.name} (the pod on GPU {gpu})")
            code = await asyncio.to_thread(ctx.stack.wait_exit, victim.name, 60.0)
            if code is not None:
                t_exit = time.perf_counter()
            ctx.event(f"{victim.name} drained, exit code {code}")
        # Watched past the longest window the routing check may use, so its verdict is seen.
        longest = dead_window_s(parse_gateway(ctx.stack.stack.gateway).health) + 1.0
        since = 0.0 if t_drain is None else time.perf_counter() - t_drain
        await ctx.sleep(max(3.0, longest - since))
    finally:
        results = await load.finish()
        await watch.stop()
    ctx.record_alert(ALERT, fired)
    res.samples = samples(results, ctx.t0)
    _check_page(ctx, fired, gpu, victim.name)
    if t_drain is None:
        res.check("replica drained", "drained after the page", "no page, no drain", False)
    else:
        health = parse_gateway(ctx.stack.stack.gateway).health
        window = drain_window_s(health, None if t_exit is None else t_exit - t_drain)
        check_drained_routing(ctx, watch, str(victim.index), t_drain, window)
        cut = cut_at(results, t_drain)
        res.check(
            "in-flight requests finish",
            "the replica was running requests; every request in flight at the drain completes",
            f"{running or 0:.0f} running on it at the drain; {len(cut)} failed or cut; exit "
            f"code {code}",
            running is not None and running >= 1 and not cut and code == 0,
        )
    _check_remediation(ctx, victim.index)


def check_drained_routing(
    ctx: DrillContext, watch: RouteWatch, index: str, t_drain: float, window: tuple[float, str]
) -> None:
    """Nothing new routed to the drained replica later than `window` (`drain_window_s`) after
    the drain began; seen, not assumed: a sample after the window must show its routing."""
    span, why = window
    last = watch.last_routed(index, t_drain + 0.5)
    seen = watch.observed(index, t_drain + span + 0.5)
    ctx.result.check(
        "no new requests to the drained replica",
        f"no routing decision to it later than {span:g} s after the drain began ({why})",
        ("none" if last is None else f"last {last - t_drain:.1f} s after")
        + ("" if seen else f"; {unobserved(index, span)}"),
        seen and (last is None or last - t_drain <= span + 0.5),
    )


def _check_page(ctx: DrillContext, fired: Notified | None, gpu: int, pod: str) -> None:
    res = ctx.result
    if fired is None:
        ctx.check_page("ECC page", ALERT, fired)
        return
    labels, notes = fired.labels, fired.annotations
    ctx.check_page("ECC page", ALERT, fired)
    summary = notes.get("summary", "")
    named = labels.get("gpu") == str(gpu) and labels.get("Hostname") == NODE_NAME
    res.check(
        "the page names GPU and node",
        f"gpu={gpu}, Hostname={NODE_NAME} (pod {pod}) in its labels and summary",
        f"gpu={labels.get('gpu')} Hostname={labels.get('Hostname')} pod={labels.get('pod')}"
        f"; summary: {summary}",
        named and f"GPU {gpu}" in summary and NODE_NAME in summary,
    )
    url = notes.get("runbook_url", "")
    anchor = urlsplit(url).fragment
    path = Path(urlsplit(url).path)
    section = f"## {ALERT}"
    has = path.is_file() and section in path.read_text(encoding="utf-8")
    res.check(
        "the page links its runbook entry",
        f"runbook_url to the runbook's `{section}` section (#{ALERT.lower()})",
        url or "no runbook_url",
        has and anchor == ALERT.lower(),
    )


def _check_remediation(ctx: DrillContext, replica_index: int) -> None:
    pool = ctx.stack.pool_of(next(iter(ctx.stack.replicas)))
    commands = ecc_remediation(ctx.stack.stack, pool, replica_index, NODE_NAME)
    checks = [check_command(c) for c in commands]
    ctx.result.notes.append(f"kubectl: {kubectl_version()}")
    ctx.result.check(
        "Kubernetes remediation validates offline",
        "cordon and drain accepted by kubectl --dry-run=client (no cluster contacted)",
        "; ".join(f"kubectl {' '.join(c.command)}: {c.detail}" for c in checks),
        all(c.ok for c in checks),
    )
