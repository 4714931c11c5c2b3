"""The production drills that restart a replica: kill-replica (SIGKILL, then SIGTERM) and
load-not-ready (a restart under load), each after a step that reads the room left under the
flapping page."""

from __future__ import annotations

from inhouse.drill.context import SEEDS_DEGRADED_TTFT_MS
from inhouse.drill.prodshell import AgentLoad, Step, _am, _bench, _k, _q
from inhouse.drill.victim import NEW_POD, POD, Victim, last_victim
from inhouse.metric_names import replica_label
from inhouse.render.alerts_replicas import (
    FLAP_RESTARTS,
    FLAP_WINDOW,
    FLAPPING,
    REPLICA_DOWN,
    REPLICA_DOWN_SEVERITY,
)
from inhouse.render.k8s_engine import labels
from inhouse.render.layout import replica_pod
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import PoolSpec, StackSpec


def _chosen(victim: Victim, argv: list[str]) -> str:
    """`argv`'s shell line, after the lines that choose and label a scaled pool's pod."""
    return "\n".join(line for line in (victim.choose_shell(), _k(argv)) if line)


def _restart_room(victim: Victim, pool: PoolSpec, ns: str, steps: list[Step]) -> list[Step]:
    """`steps`, after a first one that reads how often the victim restarted in the last
    FLAP_WINDOW: with the restarts `steps` make (their `delete pod` of it), FLAP_RESTARTS page
    as InhouseEngineReplicaFlapping. A static replica keeps its series across restarts, so a
    rollout or another drill in the hour before counts; a scaled pool's replacement is a new pod,
    a new series, and starts from nothing (no step)."""
    if victim.index is None:
        return steps
    pod = replica_pod(pool.name, victim.index)
    restarts = sum(
        1
        for step in steps
        for argv in step.kubectl
        if argv[2:4] == ["delete", "pod"] and victim.selector in argv
    )
    starts = (
        f'process_start_time_seconds{{namespace="{ns}", job="{pool.name}-engine", pod="{pod}"}}'
    )
    expr = f"changes({starts}[{FLAP_WINDOW}])"
    allowed = FLAP_RESTARTS - 1 - restarts
    room = Step(
        f"room under the flapping page: {pod}'s restarts in the last {FLAP_WINDOW}",
        _q(expr),
        [
            f"at most {allowed}: this drill restarts {pod} {restarts} time(s), and "
            f"{FLAP_RESTARTS} restarts within {FLAP_WINDOW} page as {FLAPPING}. More (a rollout "
            "or another drill on it in the last hour): wait until it drops, or tell the "
            "on-call the page is the drill's"
        ],
        promql=[expr],
    )
    return [room, *steps]


def _kill_replica(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    return _restart_room(
        last_victim(stack, pool, ns, "kill-replica"), pool, ns, _kill_steps(stack, pool, ns, load)
    )


def _kill_steps(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    victim = last_victim(stack, pool, ns, "kill-replica")
    sessions, at = load.share()
    sel, model = victim.selector, pool.client_model_name
    kill = ["-n", ns, "delete", "pod", "-l", sel, "--grace-period=0", "--force"]
    drain = ["-n", ns, "delete", "pod", "-l", sel, "--wait=false"]
    up = f'up{{namespace="{ns}", job="{pool.name}-engine"}}'
    p95 = f'inhouse:time_to_first_token_seconds:p95_5m{{model_name="{model}"}}'
    decisions = f'inhouse_gateway_routing_decisions_total{{pool="{pool.name}"}}'
    routed = f"sum by (replica) (rate({decisions}[1m]))"
    errors = 'sum(increase(inhouse_gateway_requests_total{code=~"5.."}[10m]))'
    if victim.index is None:
        sigkill, rejoin = _scaled_kill(stack, pool, ns, victim, kill, (up, routed))
    else:
        sigkill, rejoin = _static_kill(pool, ns, victim, kill, (up, routed))
    degraded = Step(
        "degraded mode: p95 TTFT with one replica fewer",
        _q(p95),
        [
            f"p95 TTFT within the degraded SLO ({SEEDS_DEGRADED_TTFT_MS:g} ms unless the plan "
            "says otherwise)"
        ],
        promql=[p95],
    )
    return [
        Step(
            f"agent load at {at}",
            _bench("kill-replica", pool, load.workload(sessions) + " --duration 1800"),
            ["the bench runs; note its start time"],
        ),
        *sigkill,
        degraded,
        rejoin,
        Step(
            "SIGTERM (graceful drain) of "
            + (
                "one running pod, chosen and labelled again"
                if victim.index is None
                else "the same replica"
            ),
            _chosen(victim, drain),
            ["in-flight requests complete; no 5xx: " + _q(errors)],
            kubectl=[*victim.choose, drain],
            promql=[errors],
        ),
    ]


def _static_kill(
    pool: PoolSpec, ns: str, victim: Victim, kill: list[str], queries: tuple[str, str]
) -> tuple[list[Step], Step]:
    """kill-replica's SIGKILL step and its rejoin step for a static replica, as `_scaled_kill`
    for a scaled pool. A static replica's pod comes back under its name, in its slot."""
    up, routed = queries
    ready = ["-n", ns, "wait", "--for=condition=Ready", "pod", "-l", victim.selector,
             "--timeout=900s"]  # fmt: skip
    sigkill = [
        Step(
            "SIGKILL one replica (force delete)",
            _k(kill),
            [
                *_kill_pages(pool),
                f"routing to replica {victim.index} stops within the gateway's health "
                "window: " + _q(routed),
                STREAMS_CUT,
            ],
            kubectl=[kill],
            promql=[up, routed],
        )
    ]
    rejoin = Step(
        "the replacement rejoins only when ready",
        _k(ready),
        [f"its pod is Ready before the gateway routes to replica {victim.index}: " + _q(routed)],
        kubectl=[ready],
    )
    return sigkill, rejoin


STREAMS_CUT = "streams in flight end with an error event; nothing that had not streamed fails"


def _kill_pages(pool: PoolSpec) -> list[str]:
    return [
        f"{REPLICA_DOWN} reaches Alertmanager within ~2 minutes as a {REPLICA_DOWN_SEVERITY} "
        "(one replica lost is the degraded mode the pool was sized for): " + _am(REPLICA_DOWN),
        f"nothing pages for pool {pool.name} while the other replicas serve: "
        f'amtool --alertmanager.url="$AM" alert query severity=page pool={pool.name}',
    ]


def _scaled_kill(
    stack: StackSpec,
    pool: PoolSpec,
    ns: str,
    victim: Victim,
    kill: list[str],
    queries: tuple[str, str],
) -> tuple[list[Step], Step]:
    """kill-replica's SIGKILL steps and its rejoin step for a scaled pool (the degraded-mode
    step goes between them); `queries`: the pool's `up` and its routing by slot. Its pods have
    no index, and the gateway gives each address whichever slot its discovery finds free (the
    lowest), so the routing query's `replica` is a slot, not a pod: the script prints the
    victim's pod and address before the kill, the replacement's (the pool's newest pod) once
    the pool is Ready, and for each the gateway's log line for that address, which names its
    slot."""
    up, routed = queries
    ip = ["-n", ns, "get", "pod", POD, "-o", "jsonpath={.status.podIP}"]
    logs = _gateway_logs(stack, ns)
    slot = f"replica {pool.name}/N"
    sigkill = [
        Step(
            "SIGKILL one replica (force delete): one running pod of the Deployment, labelled "
            "for the drill, its address noted",
            "\n".join(
                [
                    victim.choose_shell(),
                    f"VICTIM_IP=$({_k(ip)})",
                    'echo "drill victim\'s address: $VICTIM_IP"',
                    _k(kill),
                ]
            ),
            [*_kill_pages(pool), STREAMS_CUT],
            kubectl=[*victim.choose, ip, kill],
            promql=[up, routed],
        ),
        Step(
            "the victim's slot at the gateway: its log line for the victim's address",
            _grep_address(stack, ns, "VICTIM_IP"),
            [
                f"'{slot} left: http://$VICTIM_IP:<port> no longer in DNS': slot N was the "
                "victim's, and its rate falls to 0 within the gateway's health window of the kill: "
                + _q(routed)
            ],
            kubectl=[logs],
            promql=[routed],
        ),
    ]
    return sigkill, _scaled_rejoin(stack, pool, ns, victim, routed)


def _scaled_rejoin(stack: StackSpec, pool: PoolSpec, ns: str, victim: Victim, routed: str) -> Step:
    """kill-replica's rejoin step for a scaled pool (`_scaled_kill`): once the pool is Ready,
    the replacement's pod (the pool's newest), its address, and the gateway's log line for it,
    which names its slot; `routed`: the pool's routing by slot."""
    newest = ["-n", ns, "get", "pods", "-l", victim.pods, "--sort-by=.metadata.creationTimestamp",
              "-o", "jsonpath={.items[-1:].metadata.name}"]  # fmt: skip
    new_ip = ["-n", ns, "get", "pod", NEW_POD, "-o", "jsonpath={.status.podIP}"]
    ready = ["-n", ns, "wait", "--for=condition=Ready", "pod", "-l", victim.pods, "--timeout=900s"]
    logs = _gateway_logs(stack, ns)
    slot = f"replica {pool.name}/N"
    return Step(
        "the replacement rejoins only when ready (the pool's pods all Ready); its pod, "
        "address and slot",
        "\n".join(
            [
                _k(ready),
                f"NEW_POD=$({_k(newest)})",
                f"NEW_IP=$({_k(new_ip)})",
                'echo "replacement: pod $NEW_POD at $NEW_IP"',
                _grep_address(stack, ns, "NEW_IP"),
            ]
        ),
        [
            "the replacement is the pool's newest pod (unless the autoscaler added one "
            f"meanwhile); '{slot.replace('/N', '/M')}: http://$NEW_IP:<port> from DNS, probing' "
            "names its slot M (the lowest free one: the victim's, unless a lower one was "
            "vacant), which gets requests only once the pod is Ready: " + _q(routed)
        ],
        kubectl=[ready, newest, new_ip, logs],
        promql=[routed],
    )


def _gateway_logs(stack: StackSpec, ns: str) -> list[str]:
    """kubectl's arguments for the gateway's log of the last 30 minutes, each line naming its
    pod."""
    gateway = ",".join(f"{k}={v}" for k, v in labels(stack, "gateway").items())
    return ["-n", ns, "logs", "-l", gateway, "--since=30m", "--prefix"]


def _grep_address(stack: StackSpec, ns: str, var: str) -> str:
    """The shell line that prints the gateway's log lines naming the address in `$var`, or says
    that none does yet."""
    interval = parse_gateway(stack.gateway).discovery.interval_s
    # The address as the gateway's URL writes it (IPv6 in brackets): 10.0.0.3 is not
    # 10.0.0.30.
    return (
        f'{_k(_gateway_logs(stack, ns))} | grep -F -e "//${var}:" -e "//[${var}]:" '
        f"|| echo \"no line of the gateway's log names ${var} "
        f'yet (it looks its pods up every {interval:g} s): run this line again"'
    )


def _load_not_ready(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    victim = last_victim(stack, pool, ns, "load-not-ready")
    return _restart_room(victim, pool, ns, _not_ready_steps(victim, pool, ns, load))


def _not_ready_steps(victim: Victim, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    sessions, at = load.share()
    restart = ["-n", ns, "delete", "pod", "-l", victim.selector, "--wait=false"]
    # A scaled pool's new pod has another name and no drill label: watch the pool's pods.
    watched = victim.selector if victim.index is not None else victim.pods
    pods = ["-n", ns, "get", "pods", "-l", watched, "-w"]
    probe = [
        "-n",
        ns,
        "get",
        victim.workload,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].startupProbe}",
    ]
    decisions = f'inhouse_gateway_routing_decisions_total{{pool="{pool.name}"'
    if victim.index is not None:
        routed = f'increase({decisions}, replica="{replica_label(victim.index)}"}}[1m])'
    else:  # the gateway gives the new pod whichever slot discovery finds free
        routed = f"sum by (replica) (increase({decisions}}}[1m]))"
    return [
        Step(
            f"restart one replica (its {victim.kind} starts a new pod); agent "
            f"load at {at} 30 s later",
            _chosen(victim, restart)
            + "\nsleep 30\n"
            + _bench("load-not-ready", pool, load.workload(sessions) + " --duration 600"),
            ["the pod stays 0/1 Ready while the model loads: " + _k(pods)],
            kubectl=[*victim.choose, restart, pods],
        ),
        Step(
            "nothing routed to it before Ready",
            _q(routed),
            [
                "0 until the pod is Ready, then > 0"
                + ("" if victim.index is not None else " (the slot the new pod takes)")
            ],
            promql=[routed],
        ),
        Step(
            "the startupProbe window covers the load",
            _k(probe),
            ["periodSeconds x failureThreshold >= the model's measured load time"],
            kubectl=[probe],
        ),
    ]
