"""The seven drills as data: what each is for, the outcome to expect, and the red flags.

The reference architecture names seven drills to run before go-live and monthly after, each
with an expected outcome, red flags and a post-mortem template; these are its words made
exact for this stack. `report.md`, `drills.md`, `docs/drill.md` and `inhouse drill plan` all
read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DrillInfo:
    name: str
    title: str
    purpose: str
    expected: tuple[str, ...]
    red_flags: tuple[str, ...]
    alerts: tuple[str, ...]  # alerts that must reach Alertmanager in the drill


DRILLS: tuple[DrillInfo, ...] = (
    DrillInfo(
        "kill-replica",
        "Kill a chat replica under peak load (SIGKILL), then drain one (SIGTERM)",
        "A replica dies or is drained while agent sessions run at planned peak: the router must "
        "re-route, the degraded-mode SLO must hold, the alert must reach the on-call's queue.",
        (
            "No request that had not started streaming fails (the gateway retries it).",
            "SIGKILL: streams in flight on the dead replica end with an error event; SIGTERM: "
            "they complete.",
            "The gateway stops routing to the replica within its health window.",
            "InhouseEngineReplicaDown (a ticket: one replica lost is the degraded mode the pool "
            "was sized for) reaches Alertmanager.",
            "p95 TTFT while degraded is within the plan's degraded SLO.",
            "The replica rejoins only once its /health answers 200.",
            "InhouseEngineReplicaFlapping stays silent: the drill restarts the replica twice, "
            "and it pages at the third restart within an hour (in production the script first "
            "checks that no rollout or other drill restarted the replica in the last hour).",
        ),
        (
            "A client sees 5xx for a request that never reached a token.",
            "A drained replica cuts its streams, or keeps receiving new requests.",
            "The replica-down alert never arrives, or arrives after the replica is back.",
            "Traffic reaches the restarted replica while it still loads.",
        ),
        ("InhouseEngineReplicaDown",),
    ),
    DrillInfo(
        "kv-fill",
        "Fill the KV cache to 95% and beyond",
        "KV pressure must degrade into preemption and queueing, never into a crash, an OOM or "
        "a dropped connection, and must page before users notice.",
        (
            "KV cache use reaches at least 95% on the replica.",
            "Preemptions are counted (vllm:num_preemptions_total rises).",
            "No engine exits; no connection is dropped; requests complete.",
            "InhouseKVCacheFull (page) reaches Alertmanager.",
            "KV use falls back below 95% when the load drops, and the alert resolves.",
        ),
        (
            "An engine exits or is restarted under KV pressure.",
            "Requests fail instead of queueing (connection reset, 5xx).",
            "No page at 95% for longer than the hold.",
        ),
        ("InhouseKVCacheFull",),
    ),
    DrillInfo(
        "long-prompt-dos",
        "Long-prompt denial of service from one tenant",
        "Oversized prompts must be refused at the gateway, and a tenant flooding long prompts "
        "must be held by its own limits without hurting another tenant.",
        (
            "200K-token prompts (past the context in any case) get 400 at the gateway.",
            "They never reach an engine: the engines' prompt-token counters do not move.",
            "32K-token prompts at 10 req/s from one tenant are held by that tenant's limits "
            "(429 with Retry-After).",
            "Another tenant's interactive p95 TTFT stays within its SLO plus 10%.",
        ),
        (
            "An engine sees a prompt above its context length.",
            "The flooding tenant gets more than its limits allow.",
            "The other tenant's latency follows the flood.",
        ),
        (),
    ),
    DrillInfo(
        "bad-signature",
        "Corrupted model signature",
        "A replica whose weights changed after signing must refuse to start, loudly, and never "
        "serve; the intact weights must start.",
        (
            "With one byte of one weight file changed, the replica exits non-zero naming the file.",
            "It never answers /health 200 and never receives traffic.",
            "With the intact weights, the same replica starts and serves.",
        ),
        (
            "A replica serves altered weights.",
            "The refusal does not say which file changed.",
        ),
        (),
    ),
    DrillInfo(
        "load-not-ready",
        "Model load is not readiness",
        "A replica still loading its model must receive no traffic until its /health is 200; "
        "the rendered startupProbe must cover the model's load time.",
        (
            "Traffic sent from 30 s after the replica's start reaches none of it before its "
            "/health is 200.",
            "Once ready, the gateway takes it back into the pool.",
            "The rendered startupProbe window covers the model's load time.",
        ),
        (
            "A request reaches a loading replica (errors, or TTFT of the whole load time).",
            "A startupProbe shorter than the model load (restart loop in Kubernetes).",
        ),
        (),
    ),
    DrillInfo(
        "ecc-dbe",
        "GPU double-bit ECC error",
        "An uncorrectable memory error on one GPU must page with the GPU and node named, drain "
        "the replica on that GPU without cutting its requests, and start hardware retirement.",
        (
            "InhouseGPUDoubleBitECC (page) reaches Alertmanager naming the GPU and the node, "
            "with its runbook link.",
            "The replica on that GPU is drained: no new requests reach it, in-flight ones finish.",
            "The rendered Kubernetes remediation (cordon and drain) validates offline.",
        ),
        (
            "No page, or a page that does not say which GPU or node.",
            "Traffic keeps going to the faulty GPU's replica.",
            "In-flight requests cut by the drain.",
        ),
        ("InhouseGPUDoubleBitECC",),
    ),
    DrillInfo(
        "soak",
        "Soak: two weeks in virtual time, and a bounded live soak",
        "Slow leaks and drift (fragmentation, index growth, memory, descriptors) show only "
        "over days: simulate the days, and watch the live processes for a while.",
        (
            "Virtual: two weeks (--quick: two days) at 60% of planned peak; p95 TTFT and ITL, "
            "prefix hit rate and KV use per day drift no more than 10% day over day.",
            "Live: gateway and engine RSS and open descriptors stay flat; the last third's p95 "
            "TTFT within 10% of the first third's (after a warm-up window).",
        ),
        (
            "A metric drifting day over day (the regression rule).",
            "RSS or descriptors growing window over window.",
            "p95 TTFT growing over the live soak (its last third clearly above its first).",
        ),
        (),
    ),
)

BY_NAME = {d.name: d for d in DRILLS}
NAMES = tuple(d.name for d in DRILLS)
