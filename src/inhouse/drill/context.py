"""What every drill gets: the live stack, the judge, the load profile, a clock and its result.

The profile is the plan's when the stack file sits beside the `plan.json` that `inhouse plan`
wrote (planned peak sessions, each workload's SLO and the degraded-mode SLO); for any other
stack, and the built-in demo, it is the demo profile below, stated in the evidence.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhouse.drill.evidence import AlertRecord, DrillResult, Event
from inhouse.drill.judge import Judge
from inhouse.drill.receiver import Notified
from inhouse.drill.stack import LiveStack
from inhouse.errors import SpecError
from inhouse.plan.workload_req import MAX_SESSIONS
from inhouse.render.alerts import Severity
from inhouse.render.layout import DEFAULT_SLO, slo_of
from inhouse.spec.stack import PoolSpec
from inhouse.workload.registry import make_workload

# The built-in demo stack's profile: the sessions two simulated replicas carry on a small
# machine (each replica's engine loop, the gateway and the load generator share its cores),
# and the seeds' degraded-mode SLO (1200 ms p95 TTFT with one replica lost).
DEMO_PEAK_SESSIONS = 12
SEEDS_DEGRADED_TTFT_MS = 1200.0
ALERT_MARGIN_S = 30.0
# A generator parameter's value as `inhouse plan` writes one (it goes into shell command lines).
_PARAM_VALUE = re.compile(r"[A-Za-z0-9_.:+-]{1,64}")
# An alert's `startsAt` is a Prometheus evaluation's timestamp, aligned to its 1 s interval.
STARTS_AT_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class Profile:
    source: str  # where these numbers came from
    pool: str
    model: str
    peak_sessions: int
    ttft_slo_ms: float
    degraded_ttft_slo_ms: float
    agent_params: Mapping[str, str]
    plan_path: Path | None = None


def ttft_slo_ms(pool: PoolSpec) -> float:
    return slo_of(pool).ttft_p95_ms or DEFAULT_SLO.ttft_p95_ms or 800.0


def _peak_sessions(plan_path: Path, agent: str, traffic: Mapping[str, Any]) -> int:
    """The agent workload's planned peak: a whole number of sessions a plan can size for. The
    drill drives that many sessions, so a hand-edited 1e9 is refused, not started."""
    peak = traffic.get("peak_sessions")
    if isinstance(peak, int) and not isinstance(peak, bool) and 1 <= peak <= MAX_SESSIONS:
        return peak
    raise SpecError(
        f"{plan_path}: not a plan.json of `inhouse plan`: workloads.{agent}.traffic.peak_sessions "
        f"is {peak!r}, where a plan sizes for a whole number of 1 to {MAX_SESSIONS:,} agent "
        "sessions (the drill drives that many). Rerun `inhouse plan`, or move the file away to "
        "drill with the demo profile"
    )


# Set by the drill itself, never taken from the plan's generator parameters.
_DRILL_SET = ("sessions", "model")


def _agent_params(plan_path: Path, agent: str, plan: Mapping[str, Any]) -> dict[str, str]:
    """The agent generator's parameters the plan was verified with
    (`reproduce.bench.AGENT.params`, what `inhouse bench --plan` drives), less the sessions and
    model the drill sets: the drills load the stack with the plan's traffic shape, not the
    generator's defaults. Each is checked against the generator (it also goes into the
    `drill plan` scripts' command lines); a plan without them (hand-written) gives none."""
    bench = ((plan.get("reproduce") or {}).get("bench") or {}).get(agent) or {}
    params = bench.get("params") or {}
    where = f"reproduce.bench.{agent}.params"
    try:
        if not isinstance(params, dict):
            raise SpecError("not an object of generator parameters")
        chosen = {str(k): str(v) for k, v in params.items() if k not in _DRILL_SET}
        bad = [v for v in chosen.values() if not _PARAM_VALUE.fullmatch(v)]
        if bad:
            raise SpecError(f"value {bad[0]!r} is not a generator parameter's value")
        make_workload("agent", chosen)
    except SpecError as exc:
        raise SpecError(
            f"{plan_path}: not a plan.json of `inhouse plan`: {where}: {exc}. Rerun `inhouse "
            "plan`, or move the file away to drill with the demo profile"
        ) from None
    return chosen


def _plan_profile(plan: dict[str, Any], pool: PoolSpec, path: Path) -> Profile | None:
    workloads = plan.get("workloads", {})
    agent = next((n for n, w in workloads.items() if w.get("kind") == "agent"), None)
    if agent is None:
        return None
    peak = _peak_sessions(path, agent, workloads[agent].get("traffic") or {})
    degraded = SEEDS_DEGRADED_TTFT_MS
    for entry in plan.get("degraded", []):
        ttft = ((entry.get("degraded_slo") or {}).get(agent) or {}).get("ttft") or {}
        degraded = float(ttft.get("target_ms", degraded))
    if not 0 < degraded < math.inf:
        raise ValueError(f"degraded TTFT target {degraded:g} ms")
    return Profile(
        f"plan {path} (workloads.{agent}.traffic.peak_sessions = {peak})",
        pool.name,
        pool.client_model_name,
        peak,
        ttft_slo_ms(pool),
        degraded,
        _agent_params(path, agent, plan),
        path,
    )


def plan_profile(pool: PoolSpec, stack_path: Path) -> Profile | None:
    """The profile of the `plan.json` beside the stack file; None without one, or for a plan
    with no agent workload. A file that is not a plan's is an error naming it."""
    plan_path = stack_path.parent / "plan.json"
    if not plan_path.exists():
        return None
    try:
        return _plan_profile(json.loads(plan_path.read_text()), pool, plan_path)
    except SpecError:
        raise
    except (OSError, ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise SpecError(
            f"{plan_path}: not a plan.json of `inhouse plan` ({type(exc).__name__}: {exc}); "
            "the drill reads the load profile from it. Rerun `inhouse plan`, or move the "
            "file away to drill with the demo profile"
        ) from exc


def load_profile(pool: PoolSpec, stack_path: Path | None) -> Profile:
    profile = plan_profile(pool, stack_path) if stack_path is not None else None
    if profile is not None:
        return profile
    return Profile(
        "demo profile (no plan.json beside the stack): "
        f"{DEMO_PEAK_SESSIONS} agent sessions as planned peak, the seeds' degraded SLO",
        pool.name,
        pool.client_model_name,
        DEMO_PEAK_SESSIONS,
        ttft_slo_ms(pool),
        SEEDS_DEGRADED_TTFT_MS,
        {},
    )


class DrillContext:
    """One drill's run: its clock starts at construction."""

    def __init__(
        self,
        result: DrillResult,
        stack: LiveStack,
        judge: Judge,
        profile: Profile,
        out_dir: Path,
        quick: bool,
        soak_duration_s: float | None = None,
        soak_day_s: float | None = None,
        time_scale: float = 1.0,
    ) -> None:
        self.time_scale = time_scale
        self.result = result
        self.soak_duration_s = soak_duration_s
        self.soak_day_s = soak_day_s  # tests: a short simulated day
        self.stack = stack
        self.judge = judge
        self.profile = profile
        self.out_dir = out_dir
        self.quick = quick
        self.t0 = time.perf_counter()
        self.t0_wall = time.time()

    def alert_timeout_s(self, hold_s: float) -> float:
        """How long to wait for an alert whose rule holds `hold_s` as rendered: the scaled hold,
        plus scrapes, evaluation, Alertmanager's group wait and a margin for a busy host."""
        return hold_s * self.time_scale + ALERT_MARGIN_S

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def event(self, what: str) -> None:
        self.result.events.append(Event(round(self.now(), 3), what))

    @property
    def gateway(self) -> str:
        return self.stack.gateway_url

    def key(self, tenant: str) -> str:
        return self.stack.keys[tenant]

    async def wait_alert(
        self,
        name: str,
        labels: Mapping[str, str] | None,
        timeout_s: float,
        since: float | None = None,
    ) -> Notified | None:
        """The first firing notification of `name` for an alert that fired after `since` (a
        `perf_counter` time, the fault's; default the drill's start). An alert that began
        earlier, in the drill before (a replica it left down), is not this drill's, however
        late its notification arrives."""
        start = self.t0 if since is None else since
        wall = self.t0_wall + (start - self.t0) - STARTS_AT_SLACK_S

        def firing(n: Notified) -> bool:
            began = n.starts_at is not None and n.starts_at >= wall
            return n.status == "firing" and began and n.matches(name, labels)

        return await asyncio.to_thread(self.judge.receiver.wait_for, firing, timeout_s, start)

    async def wait_resolved(self, fired: Notified, timeout_s: float) -> Notified | None:
        def resolved(n: Notified) -> bool:
            same = all(n.labels.get(k) == v for k, v in fired.labels.items())
            return n.status == "resolved" and same

        return await asyncio.to_thread(self.judge.receiver.wait_for, resolved, timeout_s, fired.at)

    def check_page(self, check: str, alert: str, fired: Notified | None) -> bool:
        """`alert` reached the receiver as a page: Alertmanager routed it to `/page` (its
        `severity: page` route), not as a ticket."""
        return self.check_routed(check, alert, fired, "page")

    def check_routed(
        self, check: str, alert: str, fired: Notified | None, severity: Severity
    ) -> bool:
        """`alert` reached the receiver with `severity`, and Alertmanager routed it by that
        severity's route (`/page` or `/ticket`): a rules change that moved it is caught."""
        observed = "not received"
        if fired is not None:
            observed = (
                f"received {fired.at - self.t0:.1f} s into the drill, routed to "
                f"{fired.receiver}, severity {fired.labels.get('severity')}"
            )
        return self.result.check(
            check,
            f"{alert} reaches Alertmanager's receiver as a {severity}",
            observed,
            fired is not None
            and fired.receiver == severity
            and fired.labels.get("severity") == severity,
        )

    def record_alert(
        self, name: str, fired: Notified | None, resolved: Notified | None = None
    ) -> AlertRecord:
        labels = dict(fired.labels) if fired else {}
        record = AlertRecord(
            name=name,
            severity=labels.get("severity", ""),
            fired_s=round(fired.at - self.t0, 3) if fired else None,
            resolved_s=round(resolved.at - self.t0, 3) if resolved else None,
            received_by_alertmanager=fired is not None,
            labels=labels,
            annotations=dict(fired.annotations) if fired else {},
        )
        self.result.alerts.append(record)
        return record

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
