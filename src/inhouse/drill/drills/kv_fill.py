"""kv-fill: push every replica's KV cache past 95% under load, watch preemption and the page,
then drop the load and watch it recover.

The fault port holds `HOLD_FRACTION` of each replica's KV blocks (what many idle long contexts
would hold); the planned agent load plus a burst of long-context requests needs the rest and
more, so the scheduler queues and preempts (vLLM's recompute path). Quick / full: warm-up 5 /
20 s, pressure until the page plus 8 / 60 s, then the hold is released and the load stops.
"""

from __future__ import annotations

import time

from inhouse.bench.metrics import RequestResult
from inhouse.drill.context import DrillContext
from inhouse.drill.evidence import DrillResult
from inhouse.drill.load import Load, check_clients, samples
from inhouse.drill.probes import engine_value
from inhouse.drill.stack import LOAD_TENANT

ALERT = "InhouseKVCacheFull"
HOLD_FRACTION = 0.97
KV_PAGE_AT = 0.95
# Long contexts on top of the agent sessions: 8 at a time, 10K-token prompts, 300 tokens out,
# the prompt shortened to fit a pool's context (`burst_for`).
BURST = {"concurrency": 8, "input_tokens": 10_000, "output_tokens": 300}
# Tokens kept free of a pool's context beside the burst's prompt and output: the chat
# template's and the load generator's own tokens around the prompt.
CONTEXT_MARGIN = 256


def burst_for(max_model_len: int | None) -> dict[str, int]:
    """The burst for a pool whose context is `max_model_len` tokens (None: the model's own,
    past 10K): prompts that fit it with the output, or the gateway refuses each with a 400,
    which the drill counts against the stack though the stack did right."""
    if max_model_len is None:
        return dict(BURST)
    room = max_model_len - BURST["output_tokens"] - CONTEXT_MARGIN
    return {**BURST, "input_tokens": max(1, min(BURST["input_tokens"], room))}


async def run(ctx: DrillContext) -> None:
    p, res = ctx.profile, ctx.result
    warm, pressure = (5.0, 8.0) if ctx.quick else (20.0, 60.0)
    replicas = [r for r in ctx.stack.replicas.values() if r.pool == p.pool]
    params = {"sessions": p.peak_sessions, "model": p.model, **p.agent_params}
    if ctx.quick:
        params.setdefault("output", "120:400")
    res.notes.append(f"load: agent {params}; {HOLD_FRACTION:.0%} of each replica's KV held")
    before = {
        r.name: await engine_value(r.url, "vllm:num_preemptions_total") or 0.0 for r in replicas
    }
    load = Load(ctx.gateway, ctx.key(LOAD_TENANT), "agent", params, 3600, model=p.model).start()
    fired = None
    burst: Load | None = None
    try:
        await ctx.sleep(warm)
        t_fill = time.perf_counter()
        for r in replicas:
            await ctx.stack.fault(r.name, "fill_kv", {"fraction": HOLD_FRACTION})
        ctx.event(f"hold {HOLD_FRACTION:.0%} of KV on {', '.join(r.name for r in replicas)}")
        shape = burst_for(ctx.stack.stack.pool(p.pool).knobs.max_model_len)
        burst = Load(ctx.gateway, ctx.key(LOAD_TENANT), "fixed", shape, 3600, model=p.model)
        burst.start()
        ctx.event(f"long-context burst: {shape}")
        fired = await ctx.wait_alert(ALERT, None, ctx.alert_timeout_s(60.0))
        await ctx.sleep(pressure)
        peak = _max_kv(ctx, time.perf_counter() - t_fill)
        for r in replicas:
            await ctx.stack.fault(r.name, "clear", {})
        ctx.event("KV hold released, load stops")
    finally:
        results = await load.finish()
        if burst is not None:
            results += await burst.finish()
    resolved = await ctx.wait_resolved(fired, 30.0) if fired else None
    ctx.record_alert(ALERT, fired, resolved)
    after_kv = _now_kv(ctx)
    res.samples = samples(results, ctx.t0)
    after = {
        r.name: await engine_value(r.url, "vllm:num_preemptions_total") or 0.0 for r in replicas
    }
    preempted = sum(after[n] - before[n] for n in before)
    res.check(
        "KV cache use reaches 95%",
        f">= {KV_PAGE_AT:.0%} on a replica (Prometheus)",
        "no data" if peak is None else f"max {peak:.1%}",
        peak is not None and peak >= KV_PAGE_AT,
    )
    res.check(
        "preemptions counted",
        "vllm:num_preemptions_total rises",
        f"+{preempted:.0f}",
        preempted > 0,
    )
    dead = [r.name for r in replicas if not r.is_running]
    res.check(
        "no engine crash", "every replica still running", ", ".join(dead) or "all running", not dead
    )
    check_completed(res, results)
    ctx.check_page("KV page", ALERT, fired)
    res.check(
        "recovery",
        f"KV below {KV_PAGE_AT:.0%} and the page resolved once load drops",
        f"KV now {after_kv:.1%}; " + ("resolved" if resolved else "not resolved"),
        after_kv < KV_PAGE_AT and resolved is not None,
    )


def _max_kv(ctx: DrillContext, span_s: float) -> float | None:
    sel = f'vllm:kv_cache_usage_perc{{namespace="{ctx.stack.namespace}"}}'
    window = max(2, int(span_s) + 1)
    return ctx.judge.query_value(f"max(max_over_time({sel}[{window}s]))")


def _now_kv(ctx: DrillContext) -> float:
    sel = f'vllm:kv_cache_usage_perc{{namespace="{ctx.stack.namespace}"}}'
    value = ctx.judge.query_value(f"max({sel})")
    return 1.0 if value is None else value


def check_completed(res: DrillResult, results: list[RequestResult]) -> None:
    """Every request completed under KV pressure: queued, not cut nor refused (4xx, which the
    check did not count though it said "not refused"); and there were requests."""
    check_clients(
        res,
        results,
        "no dropped connection",
        "every request completes (queued, not refused or cut)",
    )
