"""Engine replica alerts: one replica down, replicas missing, a pool below its degraded mode.

Replicas, and what pages. A rolling update takes one replica of a pool out of the scrape for its
whole model load (a static replica's own Service answers nothing meanwhile: `up == 0` for
minutes), and render deploys no kube-state-metrics to tell a rollout from a crash. So one replica
down is a ticket (InhouseEngineReplicaDown, at 30 s: the pool was sized to run degraded on the
rest, and the SLO and burn-rate alerts page if users suffer); it pages when it outlasts the
rollout allowance (InhouseEngineReplicasMissing) or when more replicas are down than a rollout
ever takes, one a pool (InhouseEnginePoolBelowDegraded, at 1 minute). A replica that keeps
crashing and coming back resets all three; it pages by its process starts instead
(InhouseEngineReplicaFlapping: a third restart within an hour, which no rollout makes).
"""

from __future__ import annotations

from inhouse.render.alerts import Alert, Case, RunbookEntry, Series, Severity
from inhouse.render.layout import replica_pod
from inhouse.spec.stack import PoolSpec

ENGINE_GROUP = "inhouse-engines"
# One replica not scraped: a ticket (the kill-replica drill waits for it, at this severity).
REPLICA_DOWN = "InhouseEngineReplicaDown"
REPLICA_DOWN_SEVERITY: Severity = "ticket"
# The replicas-missing cases sample every 30 s; "missing past the allowance" is 5 minutes past.
CASE_STEP_S = 30
LOST_MARGIN_S = 300
# The below-degraded alert's rollout case: one replica out of the scrape this long, then back.
ROLLOUT_CASE_S = 600
# A replica flaps when its process restarted this many times within FLAP_WINDOW (changes of
# vLLM's process_start_time_seconds): a rollout restarts each replica once, its rollback once
# more, the kill-replica drill twice (SIGKILL, then SIGTERM); a third restart is none of them.
FLAPPING = "InhouseEngineReplicaFlapping"
FLAP_RESTARTS = 3
FLAP_WINDOW = "1h"
# The flapping cases sample each minute; a restarted replica is out of the scrape this many
# samples (its model load) before its new process answers.
FLAP_STEP_S = 60
FLAP_LOAD_STEPS = 3
FLAP_CASE_STEPS = 60
# The start time of a case's first process; each later one started when its replica went down.
FLAP_BASE_START = 1_800_000_000


def up_series(ns: str, job: str, labels: dict[str, str], values: str) -> Series:
    """`up` of one target of `job`, as a scrape in namespace `ns` labels it."""
    return Series({"namespace": ns, "job": job, **labels}, values, "up")


def replica_alerts(
    pool: PoolSpec, ns: str, allowance: tuple[int, str], cover_s: int
) -> list[Alert]:
    return [
        replica_down_alert(pool, ns, allowance),
        missing_alert(pool, ns, allowance, cover_s),
        below_degraded_alert(pool, ns, cover_s),
        flapping_alert(pool, ns),
    ]


def replica_down_alert(pool: PoolSpec, ns: str, allowance: tuple[int, str]) -> Alert:
    """One replica not scraped for 30 s: a ticket (a rollout does it to each replica)."""
    job = f"{pool.name}-engine"
    sel = f'namespace="{ns}", job="{job}"'
    pod = {"instance": "10.0.0.1:8000", "pod": replica_pod(pool.name, 0)}
    return Alert(
        name=REPLICA_DOWN,
        group=ENGINE_GROUP,
        expr=f"up{{{sel}}} == 0",
        hold="30s",
        severity=REPLICA_DOWN_SEVERITY,
        labels={"pool": pool.name},
        summary="engine {{ $labels.pod }} of pool {{ $labels.job }} is down",
        description=f"Prometheus cannot scrape the replica for 30 s; pool {pool.name} runs on "
        "the rest (degraded-mode SLO). A rollout does this to each replica while it loads; "
        f"past {allowance[0]} s it pages as InhouseEngineReplicasMissing.",
        runbook=_replica_down_runbook(sel, allowance[0]),
        cases=(
            Case(
                "down for 45 s",
                "15s",
                (up_series(ns, job, pod, "1 1 0 0 0 0 0 0"),),
                "1m30s",
                {"namespace": ns, "job": job, **pod},
            ),
            Case(
                "a 15 s blip",
                "15s",
                (up_series(ns, job, pod, "1 1 0 1 1 1 1 1"),),
                "1m30s",
                None,
            ),
        ),
    )


def _replica_down_runbook(sel: str, allowance_s: int) -> RunbookEntry:
    return RunbookEntry(
        meaning="A vLLM replica stopped answering /metrics: the process died, the engine "
        "hit an error (/health 503), the node is gone, or a rolling update is replacing it "
        "(one replica at a time; the new pod answers once its model is loaded). Its share "
        "of traffic goes to the other replicas, whose latency rises. A ticket, not a page: "
        "the pool is sized to run on one replica fewer (degraded-mode SLO), and the SLO and "
        "burn-rate alerts page if users suffer. It pages when it lasts longer than a "
        f"rollout can ({allowance_s} s: InhouseEngineReplicasMissing), when a second "
        "replica of the pool goes (InhouseEnginePoolBelowDegraded), or when it keeps coming "
        f"back: a third restart within {FLAP_WINDOW} ({FLAPPING}).",
        first_promql=f"up{{{sel}}}",
        mitigations=(
            "`kubectl -n NS describe pod POD` and `kubectl logs --previous POD -c vllm`: "
            "OOM, CUDA error, NCCL timeout?",
            "CUDA/XID errors in the log: check the GPU alerts; cordon the node if a GPU is bad.",
            "Crash after a deploy: roll back the image or the stack change.",
        ),
        escalate="Resolves by itself when a rollout's new pod is Ready. Not a rollout "
        "(`kubectl -n NS rollout status statefulset/POOL`) and not back: the pages "
        "named above follow; escalate to the platform owner then.",
    )


def replica_targets(pool: PoolSpec) -> list[dict[str, str]]:
    """The `instance` and `pod` labels of each of the pool's replicas, as the promtool cases
    scrape them."""
    return [
        {"instance": f"10.0.0.{i + 1}:8000", "pod": replica_pod(pool.name, i)}
        for i in range(pool.replicas)
    ]


def missing_alert(pool: PoolSpec, ns: str, allowance: tuple[int, str], cover_s: int) -> Alert:
    """Fewer replicas up than the pool's `replicas` for longer than a rolling update keeps one
    away (`allowance`: `layout.rollout_allowance_s`); sooner only when more are gone than a
    rollout takes (`below_degraded_alert`). `cover_s`: how long the healthy case's series last, at
    least every pool's firing case (other pools' tests use it as quiet background)."""
    job = f"{pool.name}-engine"
    sel = f'namespace="{ns}", job="{job}"'
    allowance_s, why = allowance
    return Alert(
        name="InhouseEngineReplicasMissing",
        group=ENGINE_GROUP,
        expr=f"(count(up{{{sel}}} == 1) or vector(0)) < {pool.replicas}",
        hold=prom_duration(allowance_s),
        severity="page",
        labels={"pool": pool.name},
        summary=f"pool {pool.name} has fewer than {pool.replicas} replicas up",
        description=f"A replica has been gone for over {allowance_s} s, longer than a rolling "
        "update keeps one away: pending, evicted, node lost, or failing to load.",
        runbook=_missing_runbook(sel, why),
        threshold_source=f"render's engine pods of pool {pool.name}: {why}",
        cases=_missing_cases(pool, ns, job, allowance_s, cover_s),
    )


def _missing_cases(
    pool: PoolSpec, ns: str, job: str, allowance_s: int, cover_s: int
) -> tuple[Case, ...]:
    """All up and a rollout that recovers within the allowance (quiet); a replica missing
    LOST_MARGIN_S past it (fires)."""
    replicas = replica_targets(pool)

    def last_one_gone(down_s: int) -> tuple[tuple[Series, ...], str]:
        """The last replica scrapes 0 for `down_s` from t=60s, then 1: the series, and the
        time of its last failed scrape."""
        steps = down_s // CASE_STEP_S
        rest = [up_series(ns, job, r, f"1x{steps + 4}") for r in replicas[:-1]]
        gone = up_series(ns, job, replicas[-1], f"1 1 0x{steps - 1} 1 1")
        return (*rest, gone), prom_duration(60 + CASE_STEP_S * (steps - 1))

    rollout, rollout_end = last_one_gone(allowance_s)
    lost, lost_end = last_one_gone(allowance_s + LOST_MARGIN_S)
    healthy_samples = cover_s // CASE_STEP_S + 10
    return (
        Case(
            "all replicas up",
            f"{CASE_STEP_S}s",
            tuple(up_series(ns, job, r, f"1x{healthy_samples}") for r in replicas),
            lost_end,
            None,
        ),
        Case("a rollout that recovers within the allowance", f"{CASE_STEP_S}s", rollout,
             rollout_end, None),
        Case("a replica missing past it", f"{CASE_STEP_S}s", lost, lost_end, {}),
    )  # fmt: skip


def _missing_runbook(sel: str, why: str) -> RunbookEntry:
    return RunbookEntry(
        meaning="Fewer engine pods answer than the pool's minimum, for longer than a "
        f"rolling update of it can take ({why}): a pod cannot be scheduled (no free GPUs, "
        "node down, taint), was evicted, or keeps failing its start-up. A rollout within "
        "that time does not page (InhouseEngineReplicaDown files a ticket at 30 s; a "
        "second replica gone pages within a minute as InhouseEnginePoolBelowDegraded).",
        first_promql=f"count(up{{{sel}}} == 1)",
        mitigations=(
            "`kubectl -n NS get pods -l inhouse.dev/pool=POOL -o wide` and `describe` the "
            "Pending one: Insufficient nvidia.com/gpu, node selector, init container failure "
            "(signature or GPU topology check)?",
            "A pod restarting after its startupProbe window: the weights load slower than "
            "planned (`kubectl logs POD -c vllm`); a stuck rollout: `kubectl -n NS rollout "
            "status statefulset/POOL` (one node; `deploy/POOL` on several), then `rollout "
            "undo`; a StatefulSet does not replace the pod that never got Ready: delete it.",
            "A failed verify-model init container means the weights on the node do not match "
            "their signature: do not bypass it; re-sync the weights from the registry.",
        ),
        escalate="A node is lost or GPUs are unallocatable: escalate to the hardware owner.",
    )


def prom_duration(seconds: int) -> str:
    """`905` -> `15m5s`, as Prometheus writes durations."""
    minutes, rest = divmod(seconds, 60)
    return (f"{minutes}m" if minutes else "") + (f"{rest}s" if rest or not minutes else "")


def degraded_floor(pool: PoolSpec) -> int:
    """The fewest replicas of the pool a rollout leaves up: all but one (a StatefulSet, and a
    Deployment at maxUnavailable 1, replace one at a time; the PodDisruptionBudget lets a drain
    take one). A pool of one replica has no degraded mode: its one replica is the floor."""
    return max(pool.replicas - 1, 1)


def below_degraded_alert(pool: PoolSpec, ns: str, cover_s: int) -> Alert:
    """Fewer replicas up than a rollout ever leaves (`degraded_floor`), for a minute: no
    rollout explains it, and the pool is below the degraded mode it was sized for. `cover_s`:
    as `missing_alert`'s (its healthy case is the other pools' quiet background)."""
    job = f"{pool.name}-engine"
    sel = f'namespace="{ns}", job="{job}"'
    floor = degraded_floor(pool)
    fewer = "no" if floor == 1 else f"fewer than {floor}"
    single = floor == 1
    return Alert(
        name="InhouseEnginePoolBelowDegraded",
        group=ENGINE_GROUP,
        expr=f"(count(up{{{sel}}} == 1) or vector(0)) < {floor}",
        hold="1m",
        severity="page",
        labels={"pool": pool.name},
        summary=f"pool {pool.name} has {fewer} replicas up of its {pool.replicas}",
        description="More replicas are down than a rolling update takes (one at a time): the "
        "pool runs below its degraded mode"
        + (" (a pool of one replica has none: its model is down)." if single else "."),
        runbook=_below_degraded_runbook(pool, sel, fewer, single),
        threshold_source=f"stack pools[{pool.name}].replicas {pool.replicas}: a rollout "
        "leaves all but one up" + (" (a pool of one: its only replica)" if single else ""),
        cases=_below_degraded_cases(pool, ns, job, floor, cover_s),
    )


def _below_degraded_cases(
    pool: PoolSpec, ns: str, job: str, floor: int, cover_s: int
) -> tuple[Case, ...]:
    """All up and (with a spare) a rollout's one replica loading (quiet); one more replica down
    than a rollout takes (fires)."""
    replicas = replica_targets(pool)
    samples = cover_s // CASE_STEP_S + 10

    def down(first: int, last: int, values: str) -> tuple[Series, ...]:
        """Replicas `first` to `last - 1` scrape `values`, the others 1 throughout."""
        return tuple(
            up_series(ns, job, r, values if first <= i < last else f"1x{samples}")
            for i, r in enumerate(replicas)
        )

    num_down = pool.replicas - floor + 1  # one more than a rollout takes
    loading = f"1 1 0x{ROLLOUT_CASE_S // CASE_STEP_S - 1} 1x10"
    cases = [
        Case("all replicas up", f"{CASE_STEP_S}s", down(0, 0, ""), "5m", None),
        Case(f"{num_down} of {pool.replicas} down at once", f"{CASE_STEP_S}s",
             down(0, num_down, "1 1 0x10"), "2m30s", {}),
    ]  # fmt: skip
    if pool.replicas > 1:
        last = pool.replicas - 1
        cases.insert(1, Case("a rollout: one replica loading for 10 minutes", f"{CASE_STEP_S}s",
                             down(last, last + 1, loading), "10m", None))  # fmt: skip
    return tuple(cases)


def _below_degraded_runbook(pool: PoolSpec, sel: str, fewer: str, single: bool) -> RunbookEntry:
    return RunbookEntry(
        meaning=f"Pool {pool.name} has had {fewer} replicas answering /metrics for a "
        "minute. A rollout or a node drain takes one replica of a pool at a time "
        "(StatefulSet RollingUpdate, Deployment maxUnavailable 1, the "
        "PodDisruptionBudget), so this is not one: replicas crashed together (a bad image "
        "or stack change, a model that no longer fits), or their node or GPUs are gone. "
        "The pool serves below the capacity its degraded-mode SLO was planned on"
        + (
            "; a pool of one replica has no spare, so even its rollout takes the model "
            "away (give it a second replica to roll without an outage)."
            if single
            else "."
        ),
        first_promql=f"up{{{sel}}}",
        mitigations=(
            "`kubectl -n NS get pods -l inhouse.dev/pool=POOL -o wide`: all on one node? "
            "Then the node or its GPUs (the GPU alerts). Else `kubectl -n NS logs --previous "
            "POD -c vllm` of each: the same error (OOM, CUDA, a bad argument)?",
            "Started with a deploy: `kubectl -n NS rollout undo statefulset/POOL` (one "
            "node; `deploy/POOL` on several), or revert the stack change and render again.",
            "While it recovers, shed load: lower batch tenants' limits at the gateway.",
        ),
        escalate="At once to the platform owner: the pool serves below its degraded-mode "
        "plan; to the hardware owner too if a node or GPUs are lost.",
    )


def start_values(restarts: list[int], samples: int) -> str:
    """promtool values of one replica's `process_start_time_seconds`, one sample a step: its
    process restarts at each step of `restarts` (ascending); from that step the replica is out
    of the scrape for FLAP_LOAD_STEPS (missing samples), then its new process reports the time
    it went down as its start."""
    runs: list[tuple[str, int]] = []
    for step in range(samples):
        done = [r for r in restarts if r <= step]
        if done and step < done[-1] + FLAP_LOAD_STEPS:
            value = "_"
        else:
            value = str(FLAP_BASE_START + FLAP_STEP_S * (done[-1] if done else 0))
        if runs and runs[-1][0] == value:
            runs[-1] = (value, runs[-1][1] + 1)
        else:
            runs.append((value, 1))
    # promtool: `_xN` is N missing samples, `VxN` is N + 1 samples of V
    return " ".join(f"_x{n}" if v == "_" else (f"{v}x{n - 1}" if n > 1 else v) for v, n in runs)


def flapping_alert(pool: PoolSpec, ns: str) -> Alert:
    """A replica whose process restarted FLAP_RESTARTS times within FLAP_WINDOW: it crashes after
    it got Ready (an OOM, a CUDA error under load) and comes back each time, so neither the
    replica-down ticket nor the replicas-missing page holds long enough to say so."""
    job = f"{pool.name}-engine"
    starts = f'process_start_time_seconds{{namespace="{ns}", job="{job}"}}'
    return Alert(
        name=FLAPPING,
        group=ENGINE_GROUP,
        expr=f"changes({starts}[{FLAP_WINDOW}]) >= {FLAP_RESTARTS}",
        hold="0s",
        severity="page",
        labels={"pool": pool.name},
        summary="engine {{ $labels.instance }} of pool {{ $labels.job }} restarted "
        f"{FLAP_RESTARTS} times within {FLAP_WINDOW}",
        description=f"The replica's process restarted {FLAP_RESTARTS} or more times in the last "
        f"{FLAP_WINDOW}: it keeps crashing after it got Ready. A rollout restarts each replica "
        "once, a rollback once more; this is neither.",
        runbook=_flapping_runbook(starts),
        threshold_source=f"{FLAP_RESTARTS} process restarts within {FLAP_WINDOW}: a rollout "
        "restarts each replica once, a rollback once more, the kill-replica drill twice",
        cases=_flapping_cases(pool, ns, job),
    )


def _flapping_cases(pool: PoolSpec, ns: str, job: str) -> tuple[Case, ...]:
    """A rollout, a rollout and its rollback (quiet); three crashes within the hour (fires for
    the last replica); three spread over more than an hour (quiet)."""
    replicas = replica_targets(pool)
    samples = FLAP_CASE_STEPS + 25

    def restarting(restarts: dict[int, list[int]]) -> tuple[Series, ...]:
        """Each replica's start times, replica i restarting at the steps `restarts[i]`."""
        return tuple(
            Series({"namespace": ns, "job": job, **r},
                   start_values(restarts.get(i, []), samples), "process_start_time_seconds")
            for i, r in enumerate(replicas)
        )  # fmt: skip

    last = pool.replicas - 1
    minute = FLAP_STEP_S // 60
    crashes = [10, 25, 40]
    fired_at = crashes[-1] + FLAP_LOAD_STEPS + 1  # the third new process's first sample, +1
    spread = [5, 40, 75]  # three restarts, never three within one hour
    step = f"{FLAP_STEP_S}s"
    at_end = f"{FLAP_CASE_STEPS * minute}m"
    return (
        Case("a rollout: each replica restarts once", step,
             restarting({i: [5 + 10 * i] for i in range(pool.replicas)}), at_end, None),
        Case("two restarts in an hour: a rollout and its rollback, or the kill-replica drill",
             step, restarting({last: [10, 30]}), at_end, None),
        Case("three restarts in an hour", step, restarting({last: crashes}),
             f"{fired_at * minute}m", {"namespace": ns, "job": job, **replicas[-1]}),
        Case("three restarts, never three within an hour", step, restarting({last: spread}),
             f"{(spread[-1] + FLAP_LOAD_STEPS + 2) * minute}m", None),
    )  # fmt: skip


def _flapping_runbook(starts: str) -> RunbookEntry:
    return RunbookEntry(
        meaning=f"A vLLM replica's process restarted {FLAP_RESTARTS} or more times within "
        f"{FLAP_WINDOW} (`process_start_time_seconds` changed; it is sampled only when the "
        "new process answers /metrics, so it counts restarts that came back). It loads, "
        "gets Ready, takes traffic and dies again: an OOM, a CUDA or NCCL error under load, "
        "a request that crashes the engine. Each time, the streams it was serving end with "
        "an error and the pool runs a replica short for a model load; yet each recovery "
        "resets InhouseEngineReplicaDown (a ticket) and InhouseEngineReplicasMissing, so "
        "nothing else pages on the replica itself. A page, not a ticket: a replica that "
        "crashed three times in an hour crashes again before working hours, and the pool "
        "limps on at reduced capacity all night while the SLO and burn-rate alerts may stay "
        "under their lines. A rollout restarts each replica once, a rollback once more, and "
        "the kill-replica drill twice (SIGKILL, then SIGTERM): none of them reaches "
        f"{FLAP_RESTARTS}. It resolves when fewer than {FLAP_RESTARTS} restarts remain in the "
        f"last {FLAP_WINDOW}.",
        first_promql=f"changes({starts}[{FLAP_WINDOW}])",
        mitigations=(
            "`kubectl -n NS describe pod POD` (Last State: OOMKilled? exit code) and "
            "`kubectl -n NS logs --previous POD -c vllm`: the error the engine died with.",
            "OOM or CUDA out of memory under load: lower the pool's `knobs.max_num_seqs` "
            "or `knobs.gpu_memory_utilization` in the stack and render again; until then, "
            "lower the batch tenants' limits at the gateway.",
            "CUDA/XID errors: check the GPU alerts and the Hardware dashboard; cordon the "
            "node and delete the pod so it moves to another GPU.",
            "Started with a deploy: `kubectl -n NS rollout undo statefulset/POOL` (one "
            "node; `deploy/POOL` on several), or revert the stack change.",
        ),
        escalate="To the platform owner when it started with a deploy or persists after a "
        "restart on another node; to the hardware owner when the log shows XID or ECC "
        "errors.",
    )
