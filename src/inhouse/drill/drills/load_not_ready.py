"""load-not-ready: a replica still loading its model gets no traffic until its /health is 200,
and the rendered startupProbe waits at least as long as the model takes to load.

One replica is drained and started again with a long model load (`--load-time-s`, 40 s quick,
90 s full); traffic starts 30 s after its start (the race of a pod that started 30 s ago) and
runs until 8 s after it turned ready. The engine's own prompt-token counter is read while it
loads, and the gateway's routing to it watched all along.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import yaml

from inhouse.bench.metrics import RequestResult
from inhouse.drill.context import DrillContext
from inhouse.drill.drills.kill_replica import health_window_s
from inhouse.drill.evidence import DrillResult
from inhouse.drill.load import Load, samples
from inhouse.drill.load import check_clients as load_check_clients
from inhouse.drill.probes import engine_value, health_code, loaded_at
from inhouse.drill.stack import LOAD_TENANT
from inhouse.drill.watch import RouteWatch
from inhouse.perf.memory import weight_bytes
from inhouse.render import RenderOptions
from inhouse.render.k8s_engine import render_engines
from inhouse.render.layout import ENGINE_INIT_S, NVME_READ_BYTES_S, engine_layout
from inhouse.spec.catalog import get_model
from inhouse.spec.quant import normalize_quant
from inhouse.spec.stack import PoolSpec

TRAFFIC_AFTER_S = 30.0
AFTER_READY_S = 8.0


async def run(ctx: DrillContext) -> None:
    p, res = ctx.profile, ctx.result
    load_time = 40.0 if ctx.quick else 90.0
    victim = [r for r in ctx.stack.replicas.values() if r.pool == p.pool][-1]
    pool = ctx.stack.pool_of(victim.name)
    watch = RouteWatch(ctx.stack.gateway_metrics_url, p.pool).start()
    load: Load | None = None
    t_ready: float | None = None
    seen_loading = 0.0
    t_start = time.perf_counter()
    try:
        ctx.stack.signal(victim.name, signal.SIGTERM)
        await asyncio.to_thread(ctx.stack.wait_exit, victim.name, 60.0)
        ctx.event(f"{victim.name} stopped")
        t_start = time.perf_counter()
        ctx.stack.start_replica(victim.name, load_time_s=load_time)
        ctx.event(f"{victim.name} started, model load {load_time:g} s")
        await ctx.sleep(TRAFFIC_AFTER_S)
        params = {"sessions": p.peak_sessions, "model": p.model, "output": "60:200"}
        load = Load(ctx.gateway, ctx.key(LOAD_TENANT), "agent", params, 3600, model=p.model)
        load.start()
        ctx.event(f"traffic starts ({TRAFFIC_AFTER_S:g} s after the replica's start)")
        t_ready, seen_loading = await _watch_loading(victim.url, victim.admin_url, load_time + 60.0)
        ctx.event(f"{victim.name} /health 200")
        await ctx.sleep(AFTER_READY_S)
    finally:
        results = await load.finish() if load is not None else []
        await watch.stop()
    res.samples = samples(results, ctx.t0)
    index = str(victim.index)
    if t_ready is None:
        res.check("replica becomes ready", "/health 200 after the load", "never", False)
        return
    early = watch.routed_count(index, t_start, t_ready - 0.3)
    # Seen, not assumed: a sample of the gateway's /metrics with traffic on and before ready.
    seen = watch.observed(index, t_start + TRAFFIC_AFTER_S, t_ready - 0.3 + 1e-6)
    res.check(
        "nothing reaches it while loading",
        "no routing decision to it and no prompt token on it before /health is 200",
        f"{early:.0f} routed; engine counted {seen_loading:.0f} prompt tokens while loading"
        + ("" if seen else "; routing not observed: no gateway sample with traffic on"),
        seen and early == 0 and seen_loading == 0,
    )
    joined = watch.first_healthy(index, t_ready - 0.3)
    routed = watch.routed_count(index, t_ready - 0.3, float("inf"))
    res.check(
        "it joins once ready",
        "the gateway counts it healthy within its health window of /health 200",
        "never"
        if joined is None
        else f"{joined - t_ready:+.1f} s after ready; {routed:.0f} requests routed to it since",
        joined is not None and joined - t_ready <= health_window_s(ctx) + 1.0,
    )
    check_clients(res, results)
    window, load_s = startup_probe_window_s(ctx.stack.stack, pool), model_load_s(pool)
    res.check(
        "startupProbe covers the model load",
        f">= the model's load time ({load_s:.0f} s) and the drill's ({load_time:g} s)",
        f"rendered window {window} s",
        window >= max(load_s, load_time),
    )


async def _watch_loading(url: str, admin_url: str, timeout_s: float) -> tuple[float | None, float]:
    """Poll the loading replica: when its /health turned 200, and the prompt tokens its engine
    had counted up to then. The time is the replica's own (its fault port's /loaded), as
    kill-replica reads it: under load this probe sees the 200 late, and the gateway, probing
    on its own, rightly routes there first (the probe's time if the replica does not say)."""
    deadline = time.perf_counter() + timeout_s
    seen = 0.0
    while time.perf_counter() < deadline:
        if await health_code(url) == 200:
            probed = time.perf_counter()
            at = await loaded_at(admin_url)
            return (probed if at is None else min(at, probed)), seen
        seen = max(seen, await engine_value(url, "vllm:prompt_tokens_total") or 0.0)
        await asyncio.sleep(0.2)
    return None, seen


def model_load_s(pool: PoolSpec) -> float:
    """The model's load time as render sizes it: the BF16 checkpoint from NVMe, plus engine
    start-up (CUDA graphs, warm-up)."""
    bf16 = weight_bytes(get_model(pool.model), normalize_quant("bf16"))
    return bf16 / NVME_READ_BYTES_S + ENGINE_INIT_S


def startup_probe_window_s(stack: Any, pool: PoolSpec) -> int:
    """The rendered engine StatefulSet's (or Deployment's) startupProbe window for the pool:
    initialDelaySeconds + periodSeconds x failureThreshold."""
    files = render_engines(stack, engine_layout(stack), RenderOptions())
    docs = [d for d in yaml.safe_load_all(files[f"k8s/engine-{pool.name}.yaml"]) if d]
    engine = next(d for d in docs if d.get("kind") in ("StatefulSet", "Deployment"))
    probe = engine["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    delay = int(probe.get("initialDelaySeconds", 0))
    return delay + int(probe["periodSeconds"]) * int(probe["failureThreshold"])


def check_clients(res: DrillResult, results: list[RequestResult]) -> None:
    """No request failed (before its first token or mid-stream) or was refused (4xx) while the
    replica loaded; and there were requests. Only failures before the first token counted: a
    gateway refusing the load, or streams cut, passed."""
    load_check_clients(
        res, results, "clients unaffected", "no request fails or is refused while the replica loads"
    )
