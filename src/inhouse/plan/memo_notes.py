"""The sizing memo's notes on what its figures assume: the length distribution read from each
p50/p95, the break points in the workloads' units, the bucket-read trigger levels, and what the
plan rests on that section 7 does not re-forecast. Written from `plan.json` alone, as the memo."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from inhouse.plan.memo_verify import marginal_items
from inhouse.spec.triggers import TOKEN_HISTOGRAMS
from inhouse.workload.arrivals import Z95

Z99 = 2.3263478740408408  # the standard normal's 99th percentile


def _lognormal(p50: float, p95: float) -> tuple[float, float, float]:
    """(sigma, mean, p99) of the lognormal through a median and a 95th percentile."""
    sigma = math.log(p95 / p50) / Z95
    return sigma, p50 * math.exp(sigma**2 / 2), p50 * math.exp(Z99 * sigma)


def _length_models(r: Mapping[str, Any]) -> list[str]:
    """The distribution the stated p50 and p95 are read as: two points fix no shape, and the
    mean (cost, KV) and the tail (the long pool) follow from the one assumed."""
    lines = []
    for w in r.get("requirements", {}).get("workloads", []):
        out = w["output_tokens"]
        o_sigma = _lognormal(out["p50"], out["p95"])[0]
        outputs = (
            f"output lengths lognormal through p50 {out['p50']:,} and p95 {out['p95']:,} "
            f"(sigma {o_sigma:.2f}), cut at 8x the p95"
        )
        prompt = w.get("prompt_tokens")
        if prompt is None:
            lines.append(
                f"* {w['name']}: prompts grow turn by turn from `multi_turn` (each part "
                f"lognormal through its p50 and p95); {outputs}."
            )
            continue
        # The generators' own shapes (inhouse.plan.traffic.make_workload): a shared prefix is
        # a fixed part of each prompt, a long-context prompt is a document plus a question.
        fixed = 0
        if w["kind"] in ("utility", "shared-prefix"):
            fixed = min(w.get("shared_prefix_tokens", 0), prompt["p50"] - 1)
        sigma, mean, p99 = _lognormal(prompt["p50"] - fixed, prompt["p95"] - fixed)
        cut = w.get("max_prompt_tokens") or 4 * prompt["p95"]
        extra = {
            "longctx": " plus a question (p50 60, p95 200 tokens)",
            "utility": f" after a {fixed:,}-token shared instruction" if fixed else "",
            "shared-prefix": f" after a {fixed:,}-token shared prefix" if fixed else "",
        }.get(w["kind"], "")
        lines.append(
            f"* {w['name']}: prompt lengths are lognormal through p50 {prompt['p50']:,} and p95 "
            f"{prompt['p95']:,} (sigma {sigma:.2f}): mean {mean + fixed:,.0f}, "
            f"p99 {p99 + fixed:,.0f}, cut at {cut:,}{extra}; {outputs}."
        )
    if not lines:
        return []
    return [
        "The requirements give each length as a p50 and a p95; the plan reads them as a "
        "lognormal (sigma = ln(p95/p50) / 1.645). Another shape through the same two points "
        "moves the mean, which cost and KV cache follow, and the tail, which a long-context "
        "pool serves: check it against measured lengths.",
        "",
        *lines,
        "",
    ]


def _break_units(name: str, at: float, r: Mapping[str, Any]) -> str:
    """A break point in the workloads' own units: the p95 prompt or output in tokens, the hit
    rate, the peak rate or sessions (the bare multiple left the reader to multiply)."""
    parts = []
    for workload, w in r.get("workloads", {}).items():
        if name == "prompt_p95_1.7x":
            parts.append(f"{workload} {w['prompt_tokens']['p95'] * at:,.0f}")
        elif name == "output_p95_1.7x":
            parts.append(f"{workload} {w['output_tokens']['p95'] * at:,.0f}")
        elif name == "prefix_hit_halved":
            parts.append(f"{workload} {w['planned_prefix_hit_rate'] * at:.0%}")
        elif name == "traffic_2x":
            t = w["traffic"]
            peak = (
                f"{t['peak_sessions'] * at:.0f} sessions"
                if "peak_sessions" in t
                else f"{t['peak_per_s'] * at:.2f} req/s"
            )
            parts.append(f"{workload} {peak}")
        elif name == "burstiness_2x":
            parts.append(f"{workload} CV² {w['arrival_cv2'] * at:.2f}")
    if not parts:
        return ""
    what = {
        "prompt_p95_1.7x": ("p95 prompt: ", " tokens"),
        "output_p95_1.7x": ("p95 output: ", " tokens"),
        "prefix_hit_halved": ("prefix hit rate: ", ""),
        "traffic_2x": ("peak: ", ""),
        "burstiness_2x": ("arrivals: ", ""),
    }
    head, tail = what[name]
    return f" ({head}{', '.join(parts)}{tail})"


def _not_re_forecast(r: Mapping[str, Any]) -> list[str]:
    """What the plan rests on that the rows above do not re-forecast, with its figures: first
    any 1x pass within the simulator's noise."""
    items = marginal_items(r) if "slo_check" in r else []
    workloads = r.get("requirements", {}).get("workloads", [])
    if not workloads:
        return ["", "The plan rests on: " + "; ".join(items) + "."] if items else []
    fallbacks = [
        f"{w['name']}: {w['models']['fallback']}"
        for w in workloads
        if w.get("models", {}).get("fallback")
    ]
    if fallbacks:
        items.append(
            f"the fallback model's quality ({', '.join(fallbacks)} must pass the task eval the "
            "primary passes, or a lost replica's traffic gets worse answers)"
        )
    items.append(
        "the time to replace a lost replica (model load and warm-up: the degraded mode lasts "
        "that long)"
    )
    items.append(
        "one user request becoming several model calls (tool calls, retries): read it as "
        "more traffic, the 'peak traffic doubled' row"
    )
    return ["", "Not re-forecast, though the plan rests on them: " + "; ".join(items) + "."]


def _bucket_note(r: Mapping[str, Any]) -> list[str]:
    """Why a trigger's planned prompt or output p95 differs from section 1's: the alert reads
    vLLM's histogram buckets, which interpolate linearly inside a wide bucket."""
    # A pool that takes only part of a workload's prompts (split at a length) has another p95.
    whole = {
        p["name"]
        for p in r.get("pools", ())
        if p.get("role") != "long" and p.get("long_prompt_tokens") is None
    }
    pairs = []
    for s in r["sensitivity"]:
        for t in s.get("triggers", ()):
            if t["signal"] not in TOKEN_HISTOGRAMS or len(t["workloads"]) != 1:
                continue
            length = TOKEN_HISTOGRAMS[t["signal"]][1]
            if t["pool"] not in whole:
                continue
            w = r.get("workloads", {}).get(t["workloads"][0])
            if w is not None:
                pairs.append(
                    f"{t['workloads'][0]}'s sampled p95 {length} of "
                    f"{w[f'{length}_tokens']['p95']:,.0f} tokens reads as {t['planned']:,.0f}"
                )
    if not pairs:
        return []
    return [
        "",
        "Token and TPOT levels in the triggers are what Prometheus' histogram_quantile reads "
        "from vLLM's buckets (linear inside a bucket), the figure the alert compares: "
        f"{'; '.join(pairs)}. Compare a trigger with its planned value, not with section 1.",
    ]
