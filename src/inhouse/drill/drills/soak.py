"""soak: (a) days in virtual time, in a process of its own; (b) before it, a bounded live soak.

(a) `soak_virtual` runs two weeks (--quick: two days) of the requirements' workloads at 60% of
planned peak against the stack, and the regression rule flags any day-over-day drift above 10%
in p95 TTFT, p95 TPOT, prefix hit rate or mean KV use.
(b) The live stack under steady agent load (`--duration`, default 10 minutes; --quick 60 s):
every window (30 s; --quick 10 s) the gateway's and each engine's RSS and open descriptors
(from /proc), the window's p95 TTFT and prefix hit rate. Bounds, from the second window (the
first is warm-up) to the last: RSS grows at most 10% + 16 MiB, descriptors at most 8; each
window's p95 TTFT at most 10% above the first window's (called only when the bootstrap lower
bound of the window's p95 is above that: a window of a few dozen requests measures its p95
loosely, and a noisy host must not fail a stable stack); a request streamed in every window,
and every process of the second window still runs in the last.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from inhouse.bench.metrics import RequestResult
from inhouse.drill.context import DrillContext
from inhouse.drill.load import Load, p95_ttft_ms, samples
from inhouse.drill.probes import engine_value
from inhouse.drill.soak_virtual import CRM_EXAMPLE, DRIFT_LIMIT
from inhouse.drill.stack import LOAD_TENANT
from inhouse.launch.tether import tethered_argv
from inhouse.spec.stack import dump_stack

RSS_SHARE, RSS_SLACK_MIB, FD_SLACK, P95_SHARE = 0.10, 16.0, 8, 0.10
BOOTSTRAP_DRAWS = 1000


def proc_figures(pid: int) -> tuple[float, int]:
    """(RSS in MiB, open file descriptors) of a process, from /proc."""
    rss_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
    return rss_kib / 1024.0, len(os.listdir(f"/proc/{pid}/fd"))


def requirements_path(ctx: DrillContext) -> Path:
    """The plan's requirements (its Reproduce command names them) when the stack came from
    `inhouse plan`, else the CRM example's (the demo stack's shape)."""
    plan = ctx.profile.plan_path
    if plan is not None and plan.exists():
        cmd = json.loads(plan.read_text()).get("reproduce", {}).get("plan", "")
        parts = cmd.split()
        if len(parts) > 2 and Path(parts[2]).exists():
            return Path(parts[2])
    return CRM_EXAMPLE


async def run(ctx: DrillContext) -> None:
    days = 2 if ctx.quick else 14
    window = 10.0 if ctx.quick else 30.0
    duration = ctx.soak_duration_s or (60.0 if ctx.quick else 600.0)
    # NOTE: live first, then virtual: on a small host the simulator's core would otherwise
    # be taken from the live engines, and their p95 would measure the contention.
    live = await _live(ctx, duration, window)
    virtual = await _start_virtual(ctx, days)
    await _finish_virtual(ctx, virtual, days)
    _check_live(ctx, live)


async def _start_virtual(ctx: DrillContext, days: int) -> tuple[asyncio.subprocess.Process, Path]:
    where = ctx.out_dir / "soak"
    where.mkdir(parents=True, exist_ok=True)
    stack_file = where / "stack.yaml"
    stack_file.write_text(dump_stack(ctx.stack.stack), encoding="utf-8")
    out = where / "virtual.json"
    reqs = requirements_path(ctx)
    argv = [
        sys.executable,
        "-m",
        "inhouse.drill.soak_virtual",
        "--stack",
        str(stack_file),
        "--requirements",
        str(reqs),
        "--days",
        str(days),
        "--out",
        str(out),
    ]
    if ctx.soak_day_s is not None:
        argv += ["--day-s", f"{ctx.soak_day_s:g}"]
    proc = await asyncio.create_subprocess_exec(  # forked on the loop's thread: tethered
        *tethered_argv(argv), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    ctx.event(f"virtual soak: {_days(ctx, days)} of {reqs.name} at 60% of planned peak")
    return proc, out


def _days(ctx: DrillContext, days: int) -> str:
    """ "2 simulated days", or with a shortened day "2 simulated days of 900 s (shortened)"."""
    if ctx.soak_day_s is None:
        return f"{days} simulated days"
    return f"{days} simulated days of {ctx.soak_day_s:g} s (shortened, not 24 h)"


async def _finish_virtual(
    ctx: DrillContext, virtual: tuple[asyncio.subprocess.Process, Path], days: int
) -> None:
    proc, out = virtual
    t = time.perf_counter()
    output, _ = await proc.communicate()
    ctx.event(f"virtual soak done in {time.perf_counter() - t:.0f} s")
    res = ctx.result
    if proc.returncode != 0 or not out.exists():
        tail = output.decode(errors="replace")[-800:]
        res.check("virtual soak ran", _days(ctx, days), f"failed: {tail}", False)
        return
    judge_virtual(ctx, json.loads(out.read_text()), days)


def judge_virtual(ctx: DrillContext, report: dict[str, Any], days: int) -> None:
    """The virtual soak's checks from its report (`soak_virtual.soak_report`)."""
    res = ctx.result
    done = report["days"]
    res.notes.append(f"virtual soak: {report['wall_s']:.0f} s of wall time for {len(done)} days")
    # NOTE: a day that served nothing reads 0 on every metric, and the drift rule skips a
    # metric at 0: every request failing, every day, passed "no drift".
    idle = [str(d["day"]) for d in done if d["num_requests"] - d["num_failed"] <= 0]
    res.check(
        "virtual soak ran",
        f"{_days(ctx, days)} at 60% of planned peak, requests served every day",
        f"{len(done)} days, {sum(d['num_requests'] for d in done):,} requests, "
        f"{report['wall_s']:.0f} s wall"
        + (f"; nothing served on day {', '.join(idle)}" if idle else ""),
        len(done) == days and not idle,
    )
    failed = sum(d["num_failed"] for d in done)
    res.notes.append(
        "virtual days: "
        + "; ".join(
            f"day {d['day']}: p95 TTFT {d['p95_ttft_ms']:.0f} ms, TPOT {d['p95_tpot_ms']:.1f} ms, "
            f"hit {d['prefix_hit_rate']:.1%}, KV {d['kv_use_mean']:.1%}"
            for d in done
        )
    )
    drift = report["drifts"]
    res.check(
        "no drift day over day",
        f"p95 TTFT, p95 TPOT, prefix hit rate, KV use within {DRIFT_LIMIT:.0%} day to day",
        "none"
        if not drift
        else "; ".join(f"day {d['day']} {d['metric']} {d['change']:+.1%}" for d in drift),
        not drift,
    )
    res.notes.append(f"virtual soak: {failed} requests failed in {len(done)} days")


async def _live(ctx: DrillContext, duration: float, window: float) -> list[dict[str, float]]:
    p = ctx.profile
    params = {
        "sessions": max(1, round(0.6 * p.peak_sessions)),
        "model": p.model,
        "output": "60:200",
    }
    ctx.result.notes.append(f"live soak: agent {params} for {duration:g} s, windows {window:g} s")
    load = Load(ctx.gateway, ctx.key(LOAD_TENANT), "agent", params, 3600, model=p.model).start()
    ctx.event(f"live soak: {duration:g} s")
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    try:
        prev = await _hits(ctx)
        while time.perf_counter() - start < duration:
            t0 = time.perf_counter()
            await ctx.sleep(window)
            hits = await _hits(ctx)
            rows.append(_sample(ctx, load, t0, prev, hits))
            prev = hits
    finally:
        results = await load.finish()
    ctx.result.samples = samples(results, ctx.t0)
    for row in rows:  # p95 by window from the complete record
        row["p95_ttft_ms"] = p95_ttft_ms(results, row["t0"], row["t1"]) or 0.0
        ttfts = window_ttfts_ms(results, row["t0"], row["t1"])
        row["p95_low_ms"] = p95_lower_bound(ttfts)
        row["num_requests"] = float(len(ttfts))
    return rows


def window_ttfts_ms(results: list[RequestResult], start: float, end: float) -> list[float]:
    return [
        r.outcome.ttft_s * 1000
        for r in results
        if start <= r.outcome.t_send < end and r.outcome.num_chunks > 0
    ]


def p95_lower_bound(values: list[float], confidence: float = 0.9, seed: int = 0) -> float:
    """The lower end of a bootstrap confidence interval for the p95 of `values`: a window of a
    few dozen requests measures its p95 loosely, so a regression is called only when even this
    bound is above the limit."""
    if not values:
        return 0.0
    rng = np.random.default_rng(seed)
    data = np.asarray(values)
    draws = rng.choice(data, size=(BOOTSTRAP_DRAWS, len(data)), replace=True)
    estimates = np.percentile(draws, 95, axis=1)
    return float(np.percentile(estimates, (1 - confidence) / 2 * 100))


async def _hits(ctx: DrillContext) -> tuple[float, float]:
    hits = queries = 0.0
    for r in ctx.stack.replicas.values():
        hits += await engine_value(r.url, "vllm:prefix_cache_hits_total") or 0.0
        queries += await engine_value(r.url, "vllm:prefix_cache_queries_total") or 0.0
    return hits, queries


def _sample(
    ctx: DrillContext, load: Load, t0: float, prev: tuple[float, float], now: tuple[float, float]
) -> dict[str, float]:
    row: dict[str, float] = {"t0": t0, "t1": time.perf_counter()}
    queries = now[1] - prev[1]
    row["hit_rate"] = (now[0] - prev[0]) / queries if queries else 0.0
    procs = {"gateway": ctx.stack.gateway_proc}
    procs.update({n: r.process for n, r in ctx.stack.replicas.items()})
    for name, proc in procs.items():
        if proc is not None and proc.poll() is None:
            row[f"{name}.rss_mib"], row[f"{name}.fds"] = proc_figures(proc.pid)
    ctx.event(f"soak window: hit rate {row['hit_rate']:.0%}")
    return row


def _check_live(ctx: DrillContext, rows: list[dict[str, float]]) -> None:
    res = ctx.result
    if len(rows) < 3:
        res.check("live soak windows", "at least 3", f"{len(rows)}", False)
        return
    first, last = rows[1], rows[-1]  # the first window is warm-up
    # NOTE: a process gone by the last window has no figures there; skipping it passed the
    # memory and descriptor bounds for an engine that had died.
    gone = [k.split(".")[0] for k in first if k.endswith(".rss_mib") and k not in last]
    res.check(
        "every process to the end",
        "the gateway and every engine of the second window still running in the last",
        f"exited: {', '.join(gone)}" if gone else "all running",
        not gone,
    )
    grew = []
    for key in first:
        if key.endswith(".rss_mib") and key in last:
            bound = first[key] * (1 + RSS_SHARE) + RSS_SLACK_MIB
            if last[key] > bound:
                grew.append(f"{key} {first[key]:.0f} -> {last[key]:.0f} MiB")
    res.check(
        "memory flat",
        f"RSS grows at most {RSS_SHARE:.0%} + {RSS_SLACK_MIB:g} MiB (second window to last)",
        "; ".join(grew) or _rss(first, last),
        not grew,
    )
    fds = [
        f"{k} {first[k]:.0f} -> {last[k]:.0f}"
        for k in first
        if k.endswith(".fds") and k in last and last[k] > first[k] + FD_SLACK
    ]
    res.check(
        "descriptors flat",
        f"open descriptors grow at most {FD_SLACK}",
        "; ".join(fds) or "within the bound",
        not fds,
    )
    base = rows[0]["p95_ttft_ms"]
    limit = base * (1 + P95_SHARE)
    worst = max(rows[1:], key=lambda r: r["p95_low_ms"])
    # A window in which no request streamed has no p95 (it read 0 ms, "stable"): a failure.
    empty = [str(i) for i, r in enumerate(rows, 1) if not r["num_requests"]]
    res.check(
        "p95 TTFT stable",
        f"no window's p95 TTFT above {limit:.0f} ms (the first window's {base:.0f} ms + "
        f"{P95_SHARE:.0%}) with 90% confidence (bootstrap lower bound); a request streamed "
        "in every window",
        f"highest window p95 {worst['p95_ttft_ms']:.0f} ms (lower bound "
        f"{worst['p95_low_ms']:.0f} ms, {worst['num_requests']:.0f} requests)"
        + (f"; no request streamed in window {', '.join(empty)}" if empty else ""),
        base > 0 and worst["p95_low_ms"] <= limit and not empty,
    )
    res.notes.append(
        "live windows: "
        + json.dumps(
            [{k: round(v, 3) for k, v in r.items() if k not in ("t0", "t1")} for r in rows]
        )
    )


def _rss(first: dict[str, float], last: dict[str, float]) -> str:
    return ", ".join(
        f"{k.split('.')[0]} {first[k]:.0f} -> {last[k]:.0f} MiB"
        for k in first
        if k.endswith(".rss_mib") and k in last
    )
