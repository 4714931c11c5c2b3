"""`inhouse bench --plan PLAN_DIR --workload NAME`: the plan's own workload, judged against the
plan's own SLOs.

`inhouse plan` writes into `plan.json` (`reproduce.bench`), per workload, the generator and
parameters its simulator checks replayed, the model name its clients send, its p95 targets,
and the check's duration and warm-up. The bench drives exactly that shape and judges the p95s of
the requests sent after the warm-up against the targets, as the plan's check does (which also
fails on any failed request).

Through the gateway the engines' prefix-cache counters are scraped directly: the plan's stack
file says which engines there are, and `inhouse up` puts them at consecutive ports from the
engine base port (`--metrics-url` overrides).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inhouse.bench.metrics import RequestResult
from inhouse.errors import SpecError

# The plan's metric names, and the bench's for the same definition.
PLAN_METRICS = {"ttft": "ttft", "itl": "itl", "tpot": "tpot", "e2e": "e2el"}


@dataclass(frozen=True)
class PlanWorkload:
    """One workload of a plan, as the bench drives it."""

    plan_dir: Path
    name: str
    workload: str
    params: Mapping[str, str]
    model: str
    slo_p95_ms: Mapping[str, float]
    duration_s: float
    warmup_s: float

    @property
    def stack_path(self) -> Path:
        return self.plan_dir / "stack.yaml"

    def engine_metrics_urls(self, base_port: int, host: str = "127.0.0.1") -> tuple[str, ...]:
        """The `/metrics` of every engine `inhouse up` starts for the plan's stack."""
        from inhouse.launch.plan import plan_stack
        from inhouse.spec.load import load_stack

        plan = plan_stack(load_stack(self.stack_path), base_port, host)
        return tuple(f"{url}/metrics" for urls in plan.pool_urls.values() for url in urls)


def load_plan_workload(plan_dir: Path, name: str | None) -> PlanWorkload:
    path = plan_dir / "plan.json"
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(
            f"--plan {plan_dir}: cannot read {path} ({exc.strerror}); give the directory "
            "`inhouse plan --out` wrote"
        ) from None
    except ValueError as exc:
        raise SpecError(f"--plan {plan_dir}: {path} is not JSON ({exc})") from None
    entries: dict[str, Any] = plan.get("reproduce", {}).get("bench") or {}
    if not entries:
        raise SpecError(
            f"--plan {plan_dir}: plan.json has no reproduce.bench section; re-run `inhouse plan` "
            "with this version of inhouse"
        )
    if name not in entries:
        raise SpecError(
            f"--workload {name!r} is not a workload of the plan; with --plan use one of: "
            f"{', '.join(entries)}"
        )
    entry = entries[name]
    return PlanWorkload(
        plan_dir=plan_dir,
        name=name,
        workload=str(entry["workload"]),
        params={str(k): str(v) for k, v in entry["params"].items()},
        model=str(entry["model"]),
        slo_p95_ms={str(k): float(v) for k, v in entry["slo_p95_ms"].items()},
        duration_s=float(entry["duration_s"]),
        warmup_s=float(entry["warmup_s"]),
    )


def _p95_ms(values: Sequence[float]) -> float | None:
    return 1000.0 * float(np.percentile(values, 95)) if len(values) else None


def judge(
    results: Sequence[RequestResult], workload: PlanWorkload, duration_s: float | None = None
) -> dict[str, Any]:
    """The p95s (ms) of the requests scheduled after the warm-up against the plan's targets;
    any failed request fails the run, as in the plan's check. The warm-up is the planner's
    rule applied to this run's `duration_s` (the plan's check's length when not given): its
    first 20%, at most 30 s (`plan.verify.warmup_for`, which `inhouse report` applies too)."""
    from inhouse.plan.verify import warmup_for  # the planner: 0.35 s to import

    warmup_s = warmup_for(workload.duration_s if duration_s is None else duration_s)
    start = min((r.outcome.t_sched for r in results), default=0.0)
    counted = [r for r in results if r.outcome.t_sched - start >= warmup_s]
    done = [r for r in counted if r.success]
    values = {
        "ttft": [r.outcome.ttft_s for r in done],
        "itl": [gap for r in done for gap in r.outcome.itl_s],
        "tpot": [r.tpot_s for r in done if r.output_len > 1],
        "e2el": [r.outcome.latency_s for r in done],
    }
    metrics = {}
    for metric, target in workload.slo_p95_ms.items():
        p95 = _p95_ms(values[PLAN_METRICS[metric]])
        metrics[metric] = {
            "target_ms": target,
            "p95_ms": p95,
            "pass": p95 is not None and p95 <= target,
        }
    failed = len(counted) - len(done)
    return {
        "plan": str(workload.plan_dir),
        "workload": workload.name,
        "warmup_s": warmup_s,
        "counted": len(counted),
        "failed": failed,
        "metrics": metrics,
        "pass": bool(done) and failed == 0 and all(m["pass"] for m in metrics.values()),
    }


def judgement_lines(verdict: Mapping[str, Any]) -> list[str]:
    lines = [
        f"Plan SLOs of workload {verdict['workload']} ({verdict['plan']}), p95 of the "
        f"{verdict['counted']} requests after the {verdict['warmup_s']:g} s warm-up:"
    ]
    for metric, row in verdict["metrics"].items():
        p95 = "—" if row["p95_ms"] is None else f"{row['p95_ms']:,.1f} ms"
        mark = "ok" if row["pass"] else "MISS"
        lines.append(f"  p95 {metric:<5} {p95:>12}  target {row['target_ms']:,.0f} ms  {mark}")
    if verdict["failed"]:
        lines.append(f"  {verdict['failed']} request(s) failed: the plan allows none")
    lines.append("PASS: meets the plan's SLOs" if verdict["pass"] else "FAIL: misses the plan")
    return lines
