"""Re-plan triggers of the chosen stack: for each changed assumption, the level of a watched
series halfway from the plan to where the first SLO breaks (`inhouse.spec.triggers`).

The engine signals are per pool, since vLLM labels its series by served model only: a pool that
serves two workloads (utility calls as LoRA adapters on the chat model) mixes their prompts and
prefix hits in the same counters, so the planned value and the trigger level are those of the pool's
mix, weighted as the analytic forecast weights it (requests per second for prompt and output lengths
and TPOT, prompt tokens for the hit rate). The traffic trigger is per workload, on the gateway's
request counter by model name. Levels are rounded to what the memo prints, so the memo's words and
the rendered rule carry the same number.
"""

from __future__ import annotations

import numpy as np

from inhouse.plan.analytic import Stream
from inhouse.plan.dist import mix
from inhouse.plan.search import Candidate
from inhouse.plan.sizing import Sized
from inhouse.plan.traffic import TrafficProfile
from inhouse.spec.triggers import Trigger, TriggerSignal
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S, build_1_2_5_buckets, histogram_quantile

# Pools whose planned hit rate is below this get no hit-rate trigger: nothing to lose.
MIN_HIT_RATE = 0.05
TOKENS_QUANTILE = 0.95


def restream(stream: Stream, pool: Sized, profiles: dict[str, TrafficProfile]) -> Stream:
    """The pool's part of a workload under changed profiles (a split workload keeps its
    prompt-length range)."""
    profile = profiles[stream.name]
    span = pool.need.prompt_range
    if span is None:
        return Stream(profile, profile.shapes, stream.share)
    prompt = profile.shapes.prompt
    mask = (prompt > span[0]) & (prompt <= span[1])
    share = float(mask.mean())
    if share == 0.0:
        mask = prompt >= prompt.max()
        share = 1e-6
    return Stream(profile, profile.shapes.select(mask), share)


def early_size(size: float) -> float:
    """Halfway from today (1.0) to `size`: the level that sends the operator back to the plan."""
    return 1.0 + (size - 1.0) / 2.0


def serving_pools(candidate: Candidate) -> list[Sized]:
    """Pools that carry traffic at planned load (fallback pools wait for a failure)."""
    return [p for p in candidate.pools if p.need.role != "fallback"]


def _rates(pool: Sized) -> dict[str, float]:
    return {name: s.rate_per_s for name, s in pool.forecast.streams.items()}


def tokens_p95(pool: Sized, streams: tuple[Stream, ...], field: str = "prompt") -> float:
    """p95 prompt (`field` "prompt") or output ("output") length of the pool's mix (requests
    weighted by their forecast rate) as `histogram_quantile` reads it from vLLM's
    `request_prompt_tokens` or `request_generation_tokens` buckets (both 1-2-5 up to the pool's
    max_model_len): the figure the rule compares, which between two bucket bounds an order of
    magnitude apart is not the sample p95."""
    rates = _rates(pool)
    values, weights = [], []
    for stream in streams:
        lengths = getattr(stream.shapes, field)
        if len(lengths) == 0:
            continue
        values.append(lengths)
        weights.append(np.full(len(lengths), rates.get(stream.name, 0.0) / len(lengths)))
    v, w = np.concatenate(values), np.concatenate(weights)
    bounds = [float(b) for b in build_1_2_5_buckets(pool.choice.max_model_len)]
    cumulative = [float(w[v <= b].sum() / w.sum()) for b in bounds]
    return histogram_quantile(TOKENS_QUANTILE, bounds, cumulative)


def tpot_median_ms(pool: Sized) -> float:
    """Median TPOT of the pool's mix (the forecast's distributions, weighted by rate) as
    `histogram_quantile` reads it from vLLM's TPOT buckets."""
    dist = mix([(s.tpot, s.rate_per_s) for s in pool.forecast.streams.values()])
    cumulative = [1.0 - dist.exceed(b) for b in ITL_BUCKETS_S]
    return 1000.0 * histogram_quantile(0.5, ITL_BUCKETS_S, cumulative)


def hit_rate(pool: Sized) -> float:
    """Prompt-token-weighted prefix hit rate of the pool's mix, as vLLM's counters count it."""
    streams = pool.forecast.streams.values()
    prompt = sum(s.input_tokens_per_s for s in streams)
    return sum(s.cached_tokens_per_s for s in streams) / prompt if prompt else 0.0


def _base(pool: Sized, change: str, text: str, breaks_at: float | None) -> dict[str, object]:
    return {
        "change": change,
        "change_text": text,
        "pool": pool.need.name,
        "model": pool.need.name,
        "workloads": tuple(s.name for s in pool.need.streams),
        "breaks_at": breaks_at,
    }


def length_triggers(
    candidate: Candidate,
    changed: dict[str, TrafficProfile],
    base: tuple[str, str, float | None],
    field: str = "prompt",
) -> list[Trigger]:
    """Per pool: the p95 prompt (or output) length of its mix as planned, and as `changed`
    (the profiles at the trigger's size) makes it, both as the rule reads them."""
    signal: TriggerSignal = "output_tokens_p95" if field == "output" else "prompt_tokens_p95"
    out = []
    for pool in serving_pools(candidate):
        if field == "prompt" and pool.need.long_prompt_tokens is not None:
            # NOTE: the standard part of a split workload serves prompts up to the split
            # only: its p95 cannot follow a longer tail (it fell as the code assistant's grew,
            # the longer prompts going to the long pool), so a level on it fired on noise.
            continue
        planned = round(tokens_p95(pool, pool.need.streams, field))
        later = round(
            tokens_p95(pool, tuple(restream(s, pool, changed) for s in pool.need.streams), field)
        )
        if later <= planned:
            # The change does not raise what this pool's histogram reads (a long pool taking
            # in shorter prompts as the split moves through the tail): no level on it would
            # send the operator back before the break.
            continue
        out.append(
            Trigger(
                **_base(pool, *base),  # type: ignore[arg-type]
                signal=signal,
                planned=planned,
                threshold=later,
                window="1d",
                hold="1h",
            )
        )
    return out


def unseen_length_text(field: str) -> str:
    """A length row's words where no pool's histogram shows the change before it breaks."""
    what = "output" if field == "output" else "prompt"
    return (
        f"none on vLLM's {what}-length histograms: halfway to the break, no pool's p95 {what} "
        "rises (a split workload's pools each hold one range of prompt lengths); measure the "
        f"{what} lengths at the gateway, or plan with more margin"
    )


def hit_triggers(
    candidate: Candidate, size: float, base: tuple[str, str, float | None]
) -> list[Trigger]:
    out = []
    for pool in serving_pools(candidate):
        planned = hit_rate(pool)
        if planned < MIN_HIT_RATE:
            continue
        out.append(
            Trigger(
                **_base(pool, *base),  # type: ignore[arg-type]
                signal="prefix_hit_rate",
                planned=round(planned, 2),
                threshold=round(planned * early_size(size), 2),
                window="15m",
                hold="1h",
            )
        )
    return out


def queue_triggers(candidate: Candidate, base: tuple[str, str, float | None]) -> list[Trigger]:
    return [
        Trigger(
            **_base(pool, *base),  # type: ignore[arg-type]
            signal="queue_every_replica",
            planned=0.0,
            threshold=0.0,
            window="5m",
            hold="5m",
        )
        for pool in serving_pools(candidate)
    ]


def traffic_triggers(
    candidate: Candidate, size: float, base: tuple[str, str, float | None]
) -> list[Trigger]:
    """Per workload: its peak request rate as forecast (sessions become requests by Little's
    law), summed over the pools that serve it; the primary pool names it."""
    rates: dict[str, float] = {}
    primary: dict[str, Sized] = {}
    for pool in serving_pools(candidate):
        for name, stream in pool.forecast.streams.items():
            rates[name] = rates.get(name, 0.0) + stream.rate_per_s * pool.replicas
            if name == pool.need.name or name in pool.need.lora_adapters:
                primary[name] = pool
    out = []
    for name, rate in rates.items():
        owner = primary.get(name)
        if owner is None:
            continue
        fields = {**_base(owner, *base), "model": name, "workloads": (name,)}
        out.append(
            Trigger(
                **fields,  # type: ignore[arg-type]
                signal="request_rate",
                planned=round(rate, 2),
                threshold=round(rate * early_size(size), 2),
                window="15m",
                hold="15m",
            )
        )
    return out


def tpot_triggers(
    candidate: Candidate, size: float, base: tuple[str, str, float | None]
) -> list[Trigger]:
    """TP>1 pools: the median TPOT of the pool's mix at planned peak."""
    out = []
    for pool in serving_pools(candidate):
        if pool.choice.tp <= 1:
            continue
        median_ms = tpot_median_ms(pool)
        out.append(
            Trigger(
                **_base(pool, *base),  # type: ignore[arg-type]
                signal="tpot_median",
                planned=round(median_ms, 1),
                threshold=round(median_ms * early_size(size), 1),
                window="1h",
                hold="1h",
            )
        )
    return out


# signal -> (where the run's figure sits in `observed_signals`, its key, decimals kept)
OBSERVED = {
    "prompt_tokens_p95": ("pools", "prompt_p95_tokens", 0),
    "output_tokens_p95": ("pools", "output_p95_tokens", 0),
    "prefix_hit_rate": ("pools", "prefix_hit_rate", 2),
    "request_rate": ("workloads", "rate_per_s", 2),
    "tpot_median": ("pools", "tpot_median_ms", 1),
}


def anchored(trigger: Trigger, observed: dict[str, dict[str, dict[str, float]]]) -> Trigger:
    """The trigger with its planned value taken from the plan's simulation at 1x peak (what
    production at peak shows, which the analytic characterization only approximates: e.g. a
    session's later, longer turns), and its level moved by the same factor the analytic
    re-forecast found between the plan and the trigger."""
    where = OBSERVED.get(trigger.signal)
    if where is None:
        return trigger
    scope, key, digits = where
    name = trigger.model if scope == "workloads" else trigger.pool
    value = observed.get(scope, {}).get(name, {}).get(key)
    if value is None or trigger.planned <= 0:
        return trigger
    planned = round(value, digits)
    level = round(value * trigger.threshold / trigger.planned, digits)
    if level == planned:  # rounding swallowed the change: one step past the plan
        step = 10.0**-digits
        level = planned - step if trigger.falls else planned + step
    return trigger.model_copy(update={"planned": planned, "threshold": level})
