"""Pool sizing: enumerate replica configurations, prune by memory, size replicas analytically.

A *pool need* is what one pool must serve (streams, SLOs, allowed models, context). For each
replica configuration — model, GPU, quantization, KV dtype, tensor parallelism, token budget —
memory comes first (`perf.plan_memory` through `engine.build_replica`: weights + runtime reserve
+ one longest sequence must fit), then the analytic model finds the fewest replicas at which
every SLO holds with headroom, utilization stays under its cap and KV stays under 90%.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from inhouse.engine.build import Replica, ReplicaSpec, build_replica
from inhouse.errors import DoesNotFitError
from inhouse.plan.analytic import MAX_KV_UTILIZATION, PoolForecast, PoolModel, Stream
from inhouse.plan.requirements import Planning
from inhouse.plan.workload_req import Slo
from inhouse.spec.catalog import get_gpu, get_model
from inhouse.spec.knobs import EngineKnobs
from inhouse.spec.quant import kv_dtype_bytes, normalize_quant

# Load at which latency floors are read (an idle replica).
FLOOR_LOAD = 1e-4
MAX_REPLICAS = 64
# Batch cap used while sizing; the stack gets its own `max_num_seqs` afterwards.
SIZING_MAX_NUM_SEQS = 256
# Utilization a degraded pool may reach: overloaded, but not unstable.
DEGRADED_MAX_UTILIZATION = 0.95
# A latency is judged a floor (more replicas do not lower it) only against a count at least
# this much smaller: one more replica of thirty moves a replica's load by 3%, its p95 by less
# than the 2% a floor is read from.
FLOOR_REPLICA_STEP = 1.1


@dataclass(frozen=True, slots=True)
class Choice:
    """One replica configuration."""

    model: str
    gpu: str
    quant: str
    kv_dtype: str
    tp: int
    max_num_batched_tokens: int
    max_model_len: int

    def spec(
        self,
        backend: str,
        max_num_seqs: int = SIZING_MAX_NUM_SEQS,
        lora_adapters: tuple[str, ...] = (),
    ) -> ReplicaSpec:
        return ReplicaSpec(
            model=self.model,
            gpu=self.gpu,
            tp=self.tp,
            quant=self.quant,
            backend=backend,
            knobs=self.knobs(max_num_seqs),
            lora_adapters=lora_adapters,
        )

    def knobs(self, max_num_seqs: int) -> EngineKnobs:
        """The engine knobs this configuration runs with (the stack file's, as written)."""
        return EngineKnobs(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            kv_cache_dtype=self.kv_dtype,
        )

    @property
    def label(self) -> str:
        kv = "" if self.kv_dtype == "auto" else f", KV {self.kv_dtype}"
        return (
            f"{self.model} {self.quant}{kv} TP{self.tp} on {self.gpu}, "
            f"budget {self.max_num_batched_tokens}"
        )


@dataclass(frozen=True, slots=True)
class PoolNeed:
    """What one pool must serve. `quantiles[w]` is the quantile of workload `w`'s latencies
    this pool must keep under the targets (0.95, or tighter/looser when a workload is split
    between pools so that the mixture still meets its p95)."""

    name: str
    role: str
    streams: tuple[Stream, ...]
    models: tuple[str, ...]
    slos: dict[str, Slo]
    degraded_slos: dict[str, Slo | None]
    quantiles: dict[str, float]
    min_replicas: int
    max_model_len: int
    lora_adapters: tuple[str, ...] = ()
    long_prompt_tokens: int | None = None
    prompt_range: tuple[int, int] | None = None  # (above, up to) tokens, for a split workload


@dataclass(frozen=True, slots=True)
class Violation:
    what: str  # e.g. "chat p95 ttft", "utilization", "kv"
    value: float
    limit: float

    def __str__(self) -> str:
        if self.what.startswith("unstable"):
            # The reason says it all; its value and limit are flags (it read "... 1 ms > 0 ms").
            return self.what
        if self.what in ("utilization", "kv utilization", "batch"):
            return f"{self.what} {self.value:.2f} > {self.limit:.2f}"
        return f"{self.what} {self.value:,.0f} ms > {self.limit:,.0f} ms"


@dataclass(frozen=True, slots=True)
class Sized:
    """A configuration with its replica count and forecasts (normal and one replica lost)."""

    need: PoolNeed
    choice: Choice
    replica: Replica
    replicas: int
    forecast: PoolForecast
    degraded: PoolForecast | None
    floor: PoolForecast
    usd_per_gpu_hour: float
    limited_by: str

    @property
    def num_gpus(self) -> int:
        return self.replicas * self.choice.tp

    @property
    def usd_per_hour(self) -> float:
        return self.num_gpus * self.usd_per_gpu_hour


@dataclass(slots=True)
class Rejected:
    choice: Choice | None
    reason: str
    metric: str = ""
    floor_ms: float = 0.0
    target_ms: float = 0.0


@dataclass(slots=True)
class SizingResult:
    sized: list[Sized] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)


Corrections = dict[str, dict[str, float]]


def corrected_ms(
    value_ms: float, floor_ms: float, corrections: Corrections | None, workload: str, metric: str
) -> float:
    """A forecast with its load-dependent part (above the idle floor) scaled by the factor the
    fleet simulator measured for this workload and metric (see `planner`)."""
    factor = (corrections or {}).get(workload, {}).get(metric, 1.0)
    return floor_ms + factor * max(value_ms - floor_ms, 0.0)


def correction_key(need: PoolNeed, workload: str, metric: str) -> str:
    """The simulator's correction a forecast takes: a long-context pool's TTFT, where long
    prompts have a target of their own, is corrected by what the long prompts measured."""
    if metric == "ttft" and need.role == "long" and need.slos[workload].has_long_ttft:
        return "long_ttft"
    return metric


def check(
    forecast: PoolForecast,
    need: PoolNeed,
    *,
    headroom: float,
    max_utilization: float,
    degraded: bool = False,
    floor: PoolForecast | None = None,
    corrections: Corrections | None = None,
) -> list[Violation]:
    """Everything this forecast breaks: SLO targets (less headroom), utilization, KV, batch."""
    out: list[Violation] = []
    if not forecast.stable:
        return [Violation(f"unstable: {forecast.why_unstable}", 1.0, 0.0)]
    for workload, stream in forecast.streams.items():
        slo = need.degraded_slos.get(workload) if degraded else need.slos[workload]
        if slo is None:
            continue
        q = need.quantiles[workload]
        for metric, target in slo.targets().items():
            value = stream.p95_ms(metric, q)
            if floor is not None and corrections:
                base = floor.streams[workload].p95_ms(metric, q)
                key = correction_key(need, workload, metric)
                value = corrected_ms(value, base, corrections, workload, key)
            limit = target * (1.0 - headroom)
            if value > limit:
                out.append(Violation(f"{workload} p95 {metric}", value, limit))
    if forecast.utilization > max_utilization:
        out.append(Violation("utilization", forecast.utilization, max_utilization))
    if forecast.kv_utilization > MAX_KV_UTILIZATION:
        out.append(Violation("kv utilization", forecast.kv_utilization, MAX_KV_UTILIZATION))
    if forecast.batch_p95 > forecast.max_num_seqs:
        out.append(Violation("batch", forecast.batch_p95, forecast.max_num_seqs))
    return out


def enumerate_choices(
    need: PoolNeed, gpus: Sequence[str], planning: Planning, max_tp: dict[str, int] | None = None
) -> Iterator[Choice | Rejected]:
    """Every configuration the need allows, or why a model was refused. Tensor parallelism stays
    inside one NVLink domain and one node (`max_tp` per GPU: the offer's GPUs per node)."""
    for model_name in need.models:
        model = get_model(model_name)
        if model.max_context < need.max_model_len:
            yield Rejected(
                None,
                f"{model.name}: native context {model.max_context:,} tokens is shorter than the "
                f"{need.max_model_len:,} the pool's longest request needs",
            )
            continue
        for gpu_name in gpus:
            gpu = get_gpu(gpu_name)
            for tp in planning.tensor_parallel:
                limit = min(gpu.nvlink_domain, (max_tp or {}).get(gpu_name, gpu.gpus_per_node))
                if tp > limit or model.num_attention_heads % tp:
                    continue
                for quant in undominated_quants(planning.quantizations, gpu_name):
                    for kv in undominated_kv(planning.kv_cache_dtypes):
                        for budget in planning.max_num_batched_tokens:
                            yield Choice(
                                model.name,
                                gpu.name,
                                normalize_quant(quant).name,
                                kv,
                                tp,
                                budget,
                                need.max_model_len,
                            )


def undominated_quants(names: Sequence[str], gpu: str) -> list[str]:
    """The allowed quantizations no other allowed one beats on this GPU: one dominates another
    when its weights are no larger and its GEMMs no slower (FP8 over BF16 on an H100). A
    dominated one could only win on quality, and every allowed one is acceptable."""
    spec = get_gpu(gpu)
    quants = {normalize_quant(n).name: normalize_quant(n) for n in names}

    def beats(a: str, b: str) -> bool:
        qa, qb = quants[a], quants[b]
        faster = spec.peak_flops(qa.compute) >= spec.peak_flops(qb.compute)
        smaller = qa.weight_bytes <= qb.weight_bytes
        strictly = spec.peak_flops(qa.compute) > spec.peak_flops(qb.compute) or (
            qa.weight_bytes < qb.weight_bytes
        )
        return faster and smaller and strictly

    return [b for b in quants if not any(beats(a, b) for a in quants if a != b)]


def undominated_kv(names: Sequence[str]) -> list[str]:
    """An FP8 KV cache dominates a 16-bit one (half the bytes, same attention math)."""
    eight = [n for n in names if kv_dtype_bytes(n) == 1.0]
    return eight[:1] if eight else list(names)


def size_choice(
    need: PoolNeed,
    choice: Choice,
    planning: Planning,
    usd_per_gpu_hour: float,
    *,
    time_scale: float = 1.0,
    max_replicas: int = MAX_REPLICAS,
    corrections: Corrections | None = None,
) -> Sized | Rejected:
    """The fewest replicas of `choice` that meet the need, or why none do."""
    try:
        replica = build_replica(choice.spec(planning.backend, lora_adapters=need.lora_adapters))
    except DoesNotFitError as exc:
        return Rejected(choice, f"does not fit: {exc}", "memory")
    model = PoolModel(replica, need.streams, time_scale)
    floor = model.forecast(FLOOR_LOAD)
    idle = _idle_rejection(choice, floor, need, planning)
    if idle is not None:
        return idle
    replicas = max(need.min_replicas, 1)
    violations: list[Violation] = []
    previous: dict[str, float] = {}
    previous_replicas = 0
    while replicas <= max_replicas:
        forecast = model.forecast(1.0 / replicas, replicas)
        violations = check(
            forecast,
            need,
            headroom=planning.headroom,
            max_utilization=planning.max_utilization,
            floor=floor,
            corrections=corrections,
        )
        degraded = None
        if not violations and replicas > 1:
            degraded = model.forecast(1.0 / (replicas - 1), replicas - 1)
            violations = _degraded_violations(degraded, need, planning)
        if not violations:
            limited = "minimum replicas" if replicas == need.min_replicas else "load"
            return Sized(
                need, choice, replica, replicas, forecast, degraded, floor, usd_per_gpu_hour,
                limited,
            )  # fmt: skip
        # Latency that more replicas no longer improve is a floor, not a capacity problem.
        current = {v.what: v.value for v in violations}
        if replicas >= FLOOR_REPLICA_STEP * previous_replicas:
            stuck = _stuck(choice, forecast, planning, violations, previous, replicas)
            if stuck is not None:
                return stuck
            previous, previous_replicas = current, replicas
        replicas = _next_replicas(replicas, forecast, planning.max_utilization)
    worst = violations[0] if violations else Violation("load", 0, 0)
    return Rejected(choice, f"more than {max_replicas} replicas needed ({worst})", "capacity")


def _idle_rejection(
    choice: Choice, floor: PoolForecast, need: PoolNeed, planning: Planning
) -> Rejected | None:
    """Why `choice` fails the need on an idle replica (no replica count serves it), or None."""
    for violation in check(floor, need, headroom=planning.headroom, max_utilization=1.0):
        if " p95 " in violation.what:
            metric = violation.what.split()[-1]
            return Rejected(
                choice,
                f"{violation.what} is {violation.value:,.0f} ms on an idle replica, above the "
                f"{violation.limit:,.0f} ms limit (target less {planning.headroom:.0%} headroom)",
                metric,
                violation.value,
                violation.limit,
            )
        return Rejected(
            choice,
            f"{violation} with {FLOOR_LOAD:.2%} of the peak traffic on a replica (no replica "
            "count serves it)",
            violation.what,
        )
    return None


def _degraded_violations(
    degraded: PoolForecast, need: PoolNeed, planning: Planning
) -> list[Violation]:
    """With one replica lost, the degraded SLO's misses, where it is enforced."""
    if not (planning.enforce_degraded_slo and any(need.degraded_slos.values())):
        return []
    violations = check(
        degraded,
        need,
        headroom=0.0,
        max_utilization=DEGRADED_MAX_UTILIZATION,
        degraded=True,
    )
    return [Violation(f"degraded {v.what}", v.value, v.limit) for v in violations]


def _stuck(
    choice: Choice,
    forecast: PoolForecast,
    planning: Planning,
    violations: list[Violation],
    previous: dict[str, float],
    replicas: int,
) -> Rejected | None:
    """A latency floor: every miss within 2% of what it was at the last count, while no
    replica is overloaded.

    NOTE: not while a replica is overloaded: agent sessions are a closed loop, and an
    overloaded replica answers faster with more replicas, so its sessions send more and its
    utilization and p95s stay put until the loop leaves saturation (3,000 sessions were "a
    floor" at 4 replicas of TP2, which meet every target at 40)."""
    current = {v.what: v.value for v in violations}
    overloaded = not forecast.stable or forecast.utilization > planning.max_utilization
    if overloaded or not current:
        return None
    if not all(
        what in previous and value > 0.98 * previous[what] for what, value in current.items()
    ):
        return None
    worst = violations[0]
    return Rejected(
        choice,
        f"{worst} even at {replicas} replicas: more replicas do not lower it",
        worst.what.split()[-1],
        worst.value,
        worst.limit,
    )


def _next_replicas(replicas: int, forecast: PoolForecast, max_utilization: float) -> int:
    """Jump ahead when utilization shows how far off the count is."""
    if forecast.stable and forecast.utilization > max_utilization:
        return max(replicas + 1, math.ceil(replicas * forecast.utilization / max_utilization))
    if not forecast.stable:
        return replicas * 2
    return replicas + 1


def size_need(
    need: PoolNeed,
    offers: dict[str, float],
    planning: Planning,
    *,
    time_scale: float = 1.0,
    keep: int = 3,
    corrections: Corrections | None = None,
    max_tp: dict[str, int] | None = None,
) -> SizingResult:
    """Size the need's configurations on every GPU on offer (`{gpu: $/GPU-hour}`).

    Configurations are tried cheapest replica first; once `keep` distinct ones (by model, GPU,
    TP and quantization) are sized, a configuration whose minimum replica count already costs
    more than the `keep`-th is skipped: it could not rank.
    """
    result = SizingResult()
    choices: list[Choice] = []
    for item in enumerate_choices(need, list(offers), planning, max_tp):
        if isinstance(item, Rejected):
            result.rejected.append(item)
        else:
            choices.append(item)
    floor_replicas = max(need.min_replicas, 1)

    def lower_bound(choice: Choice) -> float:
        return floor_replicas * choice.tp * offers[choice.gpu]

    choices.sort(key=lambda c: (lower_bound(c), -c.max_num_batched_tokens))
    best: dict[tuple[str, str, int, str], float] = {}
    for choice in choices:
        if len(best) >= keep and lower_bound(choice) > sorted(best.values())[keep - 1]:
            continue
        scale = time_scale if choice.tp > 1 else 1.0
        sized = size_choice(
            need, choice, planning, offers[choice.gpu], time_scale=scale, corrections=corrections
        )
        if isinstance(sized, Rejected):
            result.rejected.append(sized)
            continue
        result.sized.append(sized)
        key = (choice.model, choice.gpu, choice.tp, choice.quant)
        best[key] = min(best.get(key, sized.usd_per_hour), sized.usd_per_hour)
    result.sized.sort(key=lambda s: (s.usd_per_hour, s.forecast.utilization))
    return result


def resize(sized: Sized, replicas: int, planning: Planning, time_scale: float = 1.0) -> Sized:
    """The same configuration at another replica count (forecasts redone)."""
    scale = time_scale if sized.choice.tp > 1 else 1.0
    model = PoolModel(sized.replica, sized.need.streams, scale)
    forecast = model.forecast(1.0 / replicas, replicas)
    degraded = model.forecast(1.0 / (replicas - 1), replicas - 1) if replicas > 1 else None
    return Sized(
        sized.need,
        sized.choice,
        sized.replica,
        replicas,
        forecast,
        degraded,
        sized.floor,
        sized.usd_per_gpu_hour,
        sized.limited_by,
    )
