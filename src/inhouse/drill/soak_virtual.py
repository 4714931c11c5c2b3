"""The soak in virtual time: days of the fleet at 60% of planned peak in the fleet simulator,
summarized day by day, with the regression rule (a drift of more than 10% day over day).

The requirements' workloads (the plan's, or the CRM example's for the demo stack) run mixed
against the stack, every request through the router and engine code that serves, for
`days` x 24 h of arrivals, in one `Fleet` whose state (KV caches, prefix indexes, sessions)
carries over from day to day. Records are taken every simulated `CHUNK_S` and folded into the
day's figures, so two weeks never hold two weeks of records. Per day: requests, failures, p95
TTFT, p95 TPOT (each request's mean inter-token latency), prefix-cache hit rate (cached over
prompt tokens), and KV use (mean and max of each replica, sampled every `CHUNK_S`). Day 1 leaves
out the requests of the cold start, as the planner's verification does (those arriving in the
first 20% of the day, at most 30 s).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from inhouse.errors import SpecError
from inhouse.fleet import Fleet, RequestRecord
from inhouse.plan.requirements import Requirements, parse_requirements
from inhouse.plan.verify import mixed_workload, warmup_for
from inhouse.spec.stack import StackSpec

DAY_S = 86_400.0
CHUNK_S = 60.0
LOAD_SHARE = 0.6
DRIFT_LIMIT = 0.10
DRIFT_METRICS = ("p95_ttft_ms", "p95_tpot_ms", "prefix_hit_rate", "kv_use_mean")
CRM_EXAMPLE = Path(__file__).resolve().parents[3] / "examples/crm-copilot/requirements.yaml"
# The cyclic collector's first threshold while the soak runs (Python's default: 700). The
# simulator allocates and drops a few objects per request and makes almost no cycles, so the
# default's ~100 collections per simulated minute find next to nothing and cost ~5% of the run.
SOAK_GC_THRESHOLD = 100_000


@dataclass(frozen=True, slots=True)
class DayStats:
    day: int
    num_requests: int
    num_failed: int
    p95_ttft_ms: float
    p95_tpot_ms: float
    prefix_hit_rate: float
    kv_use_mean: float
    kv_use_max: float
    wall_s: float


@dataclass(frozen=True, slots=True)
class Drift:
    day: int
    metric: str
    before: float
    after: float

    @property
    def change(self) -> float:
        return (self.after - self.before) / self.before if self.before else 0.0


def load_requirements(path: Path) -> Requirements:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"soak: cannot read the requirements {path} ({exc.strerror})") from None
    return parse_requirements(data, str(path))


def model_names(requirements: Requirements, stack: StackSpec) -> dict[str, str]:
    """What each workload sends as `model` on this stack: its own name where a pool serves it
    (a planned stack), else the first pool's name for agent traffic and its first adapter for
    the rest (the demo stack's chat model and its utility LoRA adapters)."""
    served = {name for pool in stack.pools for name in pool.model_names}
    pool = stack.pools[0]
    out = {}
    for req in requirements.workloads:
        if req.name in served:
            out[req.name] = req.name
        elif req.kind != "agent" and pool.lora_adapters:
            out[req.name] = pool.lora_adapters[0]
        else:
            out[req.name] = pool.client_model_name
    return out


class _Day:
    def __init__(self, warmup_until_s: float = 0.0) -> None:
        self.warmup_until_s = warmup_until_s
        self.num_warmup = 0
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.prompt = self.cached = self.failed = 0
        self.kv: list[float] = []

    def add(self, records: list[RequestRecord]) -> None:
        for r in records:
            if r.arrival_s < self.warmup_until_s:
                self.num_warmup += 1
                continue
            if not r.ok:
                self.failed += 1
                continue
            self.ttft.append(r.ttft_s)
            if r.num_output_tokens > 1:
                self.tpot.append(r.tpot_s)
            self.prompt += r.num_prompt_tokens
            self.cached += r.num_cached_tokens

    def stats(self, day: int, wall_s: float) -> DayStats:
        def p95_ms(values: list[float]) -> float:
            return float(np.percentile(values, 95)) * 1000 if values else 0.0

        return DayStats(
            day,
            len(self.ttft) + self.failed,
            self.failed,
            p95_ms(self.ttft),
            p95_ms(self.tpot),
            self.cached / self.prompt if self.prompt else 0.0,
            float(np.mean(self.kv)) if self.kv else 0.0,
            max(self.kv, default=0.0),
            wall_s,
        )


@contextlib.contextmanager
def _rare_collections() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(SOAK_GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def simulate_soak(
    stack: StackSpec,
    requirements: Requirements,
    days: int,
    *,
    load_share: float = LOAD_SHARE,
    day_s: float = DAY_S,
    on_day: Callable[[DayStats], None] | None = None,
) -> list[DayStats]:
    workload = mixed_workload(requirements, model_names(requirements, stack))
    fleet = Fleet(
        stack,
        workload,
        policy=requirements.planning.routing_policy,
        duration_s=days * day_s,
        seed=requirements.planning.seed,
        rate_scale=load_share,
        down_replicas={},
    )
    with _rare_collections():
        return _run_days(fleet, days, day_s, on_day)


def _run_days(
    fleet: Fleet, days: int, day_s: float, on_day: Callable[[DayStats], None] | None
) -> list[DayStats]:
    out: list[DayStats] = []
    for day in range(days):
        wall = time.perf_counter()
        acc = _Day(warmup_for(day_s) if day == 0 else 0.0)
        t = day * day_s
        while t < (day + 1) * day_s:
            t += min(CHUNK_S, day_s)
            fleet.run_until(t)
            acc.add(fleet.take_records())
            acc.kv.extend(fleet.kv_usage().values())
        stats = acc.stats(day + 1, time.perf_counter() - wall)
        out.append(stats)
        if on_day is not None:
            on_day(stats)
    return out


def drifts(days: list[DayStats], limit: float = DRIFT_LIMIT) -> list[Drift]:
    """Every metric that moved more than `limit` (relative) from one day to the next."""
    found = []
    for before, after in itertools.pairwise(days):
        for metric in DRIFT_METRICS:
            a, b = getattr(before, metric), getattr(after, metric)
            if a and abs(b - a) / a > limit:
                found.append(Drift(after.day, metric, a, b))
    return found


def soak_report(days: list[DayStats], info: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **info,
        "days": [asdict(d) for d in days],
        "drifts": [{**asdict(d), "change": d.change} for d in drifts(days)],
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m inhouse.drill.soak_virtual --stack S --requirements R --days N --out F`: the
    virtual soak in its own process (the live soak runs beside it), one JSON line per day on
    stdout, the report in F."""
    import argparse
    import json

    from inhouse.spec.load import load_stack

    parser = argparse.ArgumentParser(prog="inhouse.drill.soak_virtual")
    parser.add_argument("--stack", type=Path, required=True)
    parser.add_argument("--requirements", type=Path, default=CRM_EXAMPLE)
    parser.add_argument("--days", type=int, required=True)
    parser.add_argument("--day-s", type=float, default=DAY_S, help="tests: a shorter day")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    stack = load_stack(args.stack)
    requirements = load_requirements(args.requirements)
    started = time.perf_counter()

    def say(day: DayStats) -> None:
        print(json.dumps(asdict(day)), flush=True)

    days = simulate_soak(stack, requirements, args.days, day_s=args.day_s, on_day=say)
    info = {
        "stack": str(args.stack),
        "requirements": str(args.requirements),
        "load_share": LOAD_SHARE,
        "day_s": args.day_s,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    args.out.write_text(json.dumps(soak_report(days, info), indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
