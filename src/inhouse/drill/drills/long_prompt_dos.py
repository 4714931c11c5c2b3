"""long-prompt-dos: 200K-token prompts must die at the gateway; a 32K-token flood from one
tenant must be held by that tenant's limits while another tenant's interactive traffic keeps
its latency.

1. Three 200K-token prompts: 400 from the gateway, and the engines' prompt-token counters do
   not move (nothing reached an engine).
2. The interactive tenant alone (baseline, 10 / 30 s), then with the flood beside it (15 / 60
   s): 32K-token prompts at 10 req/s from `drill-flood`, whose limits are the drill stack's
   (`FLOOD_LIMITS`: tokens per minute and concurrency).
"""

from __future__ import annotations

import math
import time

import httpx

from inhouse.bench.metrics import RequestResult
from inhouse.drill.context import DrillContext
from inhouse.drill.load import MID, Load, count, p95_ttft_ms, samples
from inhouse.drill.probes import engine_value
from inhouse.drill.stack import FLOOD_TENANT, INTERACTIVE_TENANT, LOAD_TENANT
from inhouse.render.alerts_triggers import max_model_len
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import PoolSpec

HUGE_TOKENS = 200_000
# NOTE: past the pool's context in any case: catalog models take 262,144 tokens, and a
# 200K prompt to them is served, not refused (three huge prefills instead of three 400s).
PAST_CONTEXT = 1.25
FLOOD_TOKENS = 32_000
FLOOD_RATE = 10.0
SLO_MARGIN = 1.10
PROBE_TIMEOUT_S = 20.0
# After the flood, its requests in flight get this long; the rest are cut (they are the flood).
FLOOD_DRAIN_S = 30.0
CHARS_PER_TOKEN = 4  # the simulated tokenizer's count is ceil(len / 4)


async def run(ctx: DrillContext) -> None:
    p, res = ctx.profile, ctx.result
    base_s, flood_s = (10.0, 15.0) if ctx.quick else (30.0, 60.0)
    await _huge_prompts(ctx)
    params = {"sessions": 4, "model": p.model, "output": "60:200"}
    flood = {
        "prompt": f"{FLOOD_TOKENS}:{FLOOD_TOKENS}",
        "question": "60:60",
        "output": "16:16",
        "questions_per_document": 1,
        "model": p.model,
    }
    res.notes.append(
        f"interactive: agent {params} as {INTERACTIVE_TENANT}; flood: longctx "
        f"{flood} at {FLOOD_RATE:g} req/s as {FLOOD_TENANT}"
    )
    interactive = Load(
        ctx.gateway, ctx.key(INTERACTIVE_TENANT), "agent", params, 3600, model=p.model, seed=1
    ).start()
    flood_load: Load | None = None
    try:
        await ctx.sleep(base_s)
        t_flood = time.perf_counter()
        ctx.event(f"flood: {FLOOD_TOKENS}-token prompts at {FLOOD_RATE:g} req/s")
        flood_load = Load(
            ctx.gateway,
            ctx.key(FLOOD_TENANT),
            "longctx",
            flood,
            flood_s,
            model=p.model,
            rate=FLOOD_RATE,
            seed=2,
        ).start()
        await ctx.sleep(flood_s)
        t_end = time.perf_counter()
        ctx.event("flood ends")
        probe = await _probe_flood(ctx)
    finally:
        mine = await interactive.finish()
        flooded = await flood_load.finish(FLOOD_DRAIN_S) if flood_load is not None else []
    res.samples = samples([*mine, *flooded], ctx.t0)
    _check_flood(ctx, flooded, probe, flood_s)
    baseline = p95_ttft_ms(mine, 0.0, t_flood)
    during = p95_ttft_ms(mine, t_flood, t_end)
    bound = p.ttft_slo_ms * SLO_MARGIN
    res.check(
        "other tenant's p95 TTFT under the flood",
        f"<= {bound:.0f} ms (its SLO {p.ttft_slo_ms:g} ms + 10%)",
        f"{_ms(during)} during the flood ({_ms(baseline)} before)",
        during is not None and during <= bound,
    )


def _ms(value: float | None) -> str:
    return "no requests" if value is None else f"{value:.0f} ms"


def huge_tokens(pool: PoolSpec) -> int:
    """The drill's huge prompt: 200K tokens, or 25% past the pool's context when that is
    longer (`--max-model-len`, else the model's)."""
    return max(HUGE_TOKENS, math.ceil(max_model_len(pool) * PAST_CONTEXT))


async def _prompt_tokens(ctx: DrillContext) -> float | None:
    """Every engine's `vllm:prompt_tokens_total`, summed; None when one did not say (a counter
    not read is not a counter that did not move)."""
    total = 0.0
    for r in ctx.stack.replicas.values():
        value = await engine_value(r.url, "vllm:prompt_tokens_total")
        if value is None:
            return None
        total += value
    return total


async def _huge_prompts(ctx: DrillContext) -> None:
    res = ctx.result
    before = await _prompt_tokens(ctx)
    tokens = huge_tokens(ctx.stack.pool_of(next(iter(ctx.stack.replicas))))
    text = "word " * (tokens * CHARS_PER_TOKEN // 5)
    body = {"model": ctx.profile.model, "prompt": text, "max_tokens": 16}
    headers = {"Authorization": f"Bearer {ctx.key(LOAD_TENANT)}"}
    codes = []
    ctx.event(f"3 prompts of {tokens:,} tokens")
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(3):
            response = await client.post(
                f"{ctx.gateway}/v1/completions", json=body, headers=headers
            )
            codes.append(response.status_code)
    await ctx.sleep(1.0)
    after = await _prompt_tokens(ctx)
    res.check(
        "200K-token prompts refused at the gateway",
        f"400 for each ({tokens:,} tokens: 200K, or 25% past the pool's max_model_len)",
        ", ".join(map(str, codes)),
        codes == [400, 400, 400],
    )
    check_unmoved(ctx, before, after)


def check_unmoved(ctx: DrillContext, before: float | None, after: float | None) -> None:
    """The engines' prompt-token counters, read before and after the huge prompts, equal."""
    if before is None or after is None:
        observed, ok = "not read from every engine", False
    else:
        observed, ok = f"{after - before:+.0f} tokens", after == before
    ctx.result.check(
        "they never reach an engine", "engines' vllm:prompt_tokens_total unchanged", observed, ok
    )


async def _probe_flood(ctx: DrillContext) -> tuple[int, str | None]:
    """One more flood request right after the flood: refused, and told when to come back?"""
    body = {
        "model": ctx.profile.model,
        "prompt": "word " * (FLOOD_TOKENS * 4 // 5),
        "max_tokens": 16,
    }
    headers = {"Authorization": f"Bearer {ctx.key(FLOOD_TENANT)}"}
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
        try:
            response = await client.post(
                f"{ctx.gateway}/v1/completions", json=body, headers=headers
            )
        except httpx.HTTPError as exc:  # admitted and stuck behind the flood: not refused
            return 0, f"no answer in {PROBE_TIMEOUT_S:g} s ({type(exc).__name__})"
    return response.status_code, response.headers.get("retry-after")


def _check_flood(
    ctx: DrillContext, flooded: list[RequestResult], probe: tuple[int, str | None], span_s: float
) -> None:
    res = ctx.result
    limits = next(
        t.limits for t in parse_gateway(ctx.stack.stack.gateway).tenants if t.name == FLOOD_TENANT
    )
    tpm = limits.tpm or 0
    ok = sum(1 for r in flooded if r.outcome.num_chunks > 0)
    limited = sum(1 for r in flooded if r.outcome.status == 429)
    # NOTE: an admitted request cut mid-stream is admitted (its tokens count against the
    # limit) and a failure all the same
    cut = count(flooded, MID)
    other = len(flooded) - ok - limited + cut
    per_request = FLOOD_TOKENS + 60 + 16 + 32  # prompt, question, output, template
    allowed = tpm * (1 + span_s / 60.0) / per_request + 1
    res.check(
        "flood held by the tenant's limits",
        f"at most {allowed:.0f} of {len(flooded)} admitted (tpm {tpm:,} over "
        f"{span_s:g} s), the rest 429; no other failures",
        f"{ok} admitted ({cut} cut mid-stream), {limited} got 429, {other} other",
        ok <= allowed and limited > 0 and other == 0,
    )
    status, retry_after = probe
    res.check(
        "refusals say when to retry",
        "429 with Retry-After",
        f"{status}, Retry-After {retry_after}",
        status == 429 and bool(retry_after),
    )
