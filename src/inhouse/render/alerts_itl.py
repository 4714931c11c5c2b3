"""ITL alerts of a stack with `workloads`: one per pool, on vLLM's histogram by `model_name`,
the pool's served name. vLLM does not split its series by adapter, and need not here, since a
decode step serves every running sequence of the pool, so every workload on a pool sees the
same inter-token gaps.

* A pool is alerted at the tightest ITL alarm of the workloads it serves: those naming its
  model and those whose long prompts it takes (a long-context pool, which no workload names).
* A pool serving none that is another pool's `fallback` decodes for that pool's workloads
  during a failover (and outside one serves nothing): it is alerted at the degraded-mode ITL
  alarm the stack records for it, a `role: fallback` pool's `slo.itl_alarm_ms` (`inhouse plan`
  writes it from the workloads' `degraded_slo`, else their `slo`), else at the tightest ITL
  alarm of the workloads failing over onto it. No workload names a fallback's model, so it
  had no ITL alert. A pool with workloads of its own that is also a fallback keeps their
  alarm, or none where they state none: its one series cannot tell a failover from its own
  load, and a failover's alarm would page on that load.
"""

from __future__ import annotations

from inhouse.render.alerts import Alert
from inhouse.render.alerts_slo import LATENCIES, LatencyTarget, engine_target, latency_alert
from inhouse.render.layout import EngineLayout
from inhouse.spec.slo import LatencySlo
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.workloads import WorkloadSpec


def pool_itl_alerts(stack: StackSpec, engines: EngineLayout) -> list[Alert]:
    """One ITL alert per pool render runs, in a stack with workloads (without, the pools'
    own SLO alerts cover ITL: `alerts_slo.pool_targets`)."""
    if not stack.workloads:
        return []
    targets = [pool_itl_target(stack, pool) for pool in engines.pools]
    alerts = [latency_alert(t) for t in targets if t is not None]
    return [a for a in alerts if a is not None]


def pool_itl_target(stack: StackSpec, pool: PoolSpec) -> LatencyTarget | None:
    """The pool's ITL at the tightest ITL alarm of the workloads it serves, a long-context
    pool's included (no workload names its model: the length rule sends it their long
    prompts); a pool serving none is alerted as a fallback (`fallback_itl_target`)."""
    served = stack.workloads_served_by(pool)
    if not served:
        return fallback_itl_target(stack, pool)
    mine = _with_itl_alarm(served)
    if not mine:
        return None
    tightest, names = _tightest_itl(mine)
    return _itl_target(
        pool,
        names,
        f"pool {pool.name} (every workload on it decodes in the same steps; ITL SLO of {names})",
        tightest.slo,
        f"stack workloads[{tightest.name}].slo.itl_alarm_ms, the tightest ITL alarm of the "
        f"workloads on pool {pool.name}",
    )


def fallback_itl_target(stack: StackSpec, pool: PoolSpec) -> LatencyTarget | None:
    """A pool no workload is served by, another pool's `fallback`: its ITL during a failover,
    when it decodes for the workloads of the pools it stands in for (no workload names its
    model, and outside a failover it serves nothing). At the degraded-mode ITL alarm the stack
    records for it, a `role: fallback` pool's own `slo.itl_alarm_ms` (`inhouse plan` writes it
    from the workloads' `degraded_slo`, else their `slo`), else at the tightest ITL alarm of
    those workloads."""
    taken = stack.workloads_failing_over_to(pool)
    if not taken:
        return None
    primaries = [p.name for p in stack.fallback_primaries(pool)]
    scope = (
        f"fallback pool {pool.name} during a failover from pool{'s' * (len(primaries) > 1)} "
        f"{', '.join(primaries)}"
    )
    stated = pool.slo if pool.role == "fallback" else None
    if stated is not None and stated.alarm_ms("itl") is not None:
        names = ",".join(w.name for w in taken)
        return _itl_target(
            pool,
            names,
            f"{scope} (it decodes for {names}; the pool's own ITL SLO for a failover)",
            stated,
            f"stack pools[{pool.name}].slo.itl_alarm_ms, the fallback pool's SLO during a "
            "failover (`inhouse plan` writes it from the degraded_slo of the workloads that fail "
            "over onto it where they state one, else their slo)",
        )
    alarmed = _with_itl_alarm(taken)
    if not alarmed:
        return None
    tightest, names = _tightest_itl(alarmed)
    return _itl_target(
        pool,
        names,
        f"{scope} (it decodes for their workloads; ITL SLO of {names})",
        tightest.slo,
        f"stack workloads[{tightest.name}].slo.itl_alarm_ms, the tightest ITL alarm of the "
        f"workloads that fail over onto pool {pool.name} (pools[{pool.name}] states no "
        "degraded-mode slo.itl_alarm_ms)",
    )


def _with_itl_alarm(workloads: list[WorkloadSpec]) -> list[WorkloadSpec]:
    return [w for w in workloads if w.slo.alarm_ms("itl") is not None]


def _tightest_itl(workloads: list[WorkloadSpec]) -> tuple[WorkloadSpec, str]:
    """The workload with the tightest ITL alarm, and the names of all at that alarm."""
    tightest = min(workloads, key=lambda w: w.slo.alarm_ms("itl") or 0.0)
    alarm = tightest.slo.alarm_ms("itl")
    return tightest, ",".join(w.name for w in workloads if w.slo.alarm_ms("itl") == alarm)


def _itl_target(
    pool: PoolSpec, names: str, scope: str, slo: LatencySlo, source: str
) -> LatencyTarget:
    labels = {"pool": pool.name, "workload": names}
    return engine_target(pool, LATENCIES[1], labels, scope, slo, source)
