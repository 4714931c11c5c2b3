"""The steps of each drill against a production cluster: shell, kubectl argument lists (checked
by kubectl), PromQL (compiled by promtool), manifests (kubernetes-validate) and rule tests."""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from inhouse.drill.context import SEEDS_DEGRADED_TTFT_MS, ttft_slo_ms
from inhouse.drill.drills.long_prompt_dos import huge_tokens
from inhouse.drill.remediation import ecc_remediation
from inhouse.drill.victim import NEW_POD, POD, Victim, last_victim
from inhouse.metric_names import replica_label
from inhouse.render.alerts import Case, Series, render_rule_tests
from inhouse.render.alerts_gpu import gpu_rules
from inhouse.render.alerts_replicas import (
    FLAP_RESTARTS,
    FLAP_WINDOW,
    FLAPPING,
    REPLICA_DOWN,
    REPLICA_DOWN_SEVERITY,
)
from inhouse.render.k8s_engine import labels
from inhouse.render.layout import (
    MODELS_MOUNT,
    REGISTRY_CACHE,
    engine_layout,
    model_dir,
    nvml_name,
    replica_pod,
)
from inhouse.render.options import RenderOptions
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.weights import by_name_path
from inhouse.workload.agent import AgentWorkload

NODE = "NODE"  # the node under drill; the scripts read it from $NODE
SOAK_SHARE = 0.6  # the soak runs at 60% of planned peak, as the live soak does


@dataclass
class Step:
    title: str
    shell: str
    checks: list[str] = field(default_factory=list)
    kubectl: list[list[str]] = field(default_factory=list)
    promql: list[str] = field(default_factory=list)
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    rule_test: str | None = None


@dataclass(frozen=True, slots=True)
class AgentLoad:
    """The agent sessions the drills' loads drive: the planned peak of the `plan.json` beside
    the stack, else the agent workload's own default, worded as such (no step claims a planned
    peak it does not have). `source` says which, in drills.md and each script."""

    sessions: int
    source: str
    is_planned: bool
    params: tuple[tuple[str, str], ...] = ()  # the plan's agent generator parameters

    def workload(self, sessions: int) -> str:
        """`inhouse bench`'s workload arguments: the agent generator with the plan's
        parameters (its traffic shape), driving `sessions` sessions."""
        shape = "".join(f" -p {shlex.quote(f'{k}={v}')}" for k, v in self.params)
        return f"--workload agent{shape} -p sessions={sessions}"

    def share(self, fraction: float = 1.0) -> tuple[int, str]:
        """(sessions, words) for `fraction` of the load, e.g. the soak's 60%."""
        num = max(1, round(fraction * self.sessions))
        part = "" if fraction == 1.0 else f"{fraction:.0%} of "
        if self.is_planned:
            return num, f"{part}planned peak ({num} sessions)"
        return num, f"{num} sessions ({part}the agent workload's default)"


def default_agent_load(why: str = "no plan.json beside the stack") -> AgentLoad:
    sessions = AgentWorkload().sessions
    return AgentLoad(
        sessions,
        f"{why}: the loads run the agent workload's default of {sessions} sessions, not a "
        "planned peak; put the plan.json `inhouse plan` wrote beside the stack file to drill at "
        "the plan's peak",
        False,
    )


def _k(argv: list[str]) -> str:
    """`argv`'s shell line, the script's variables put in for the placeholders: the node under
    drill, and the chosen pods' names (whole words)."""
    line = "kubectl " + shlex.join(argv).replace(f"'{NODE}'", '"$NODE"').replace(NODE, '"$NODE"')
    return line.replace(f" {POD} ", ' "$POD" ').replace(f" {NEW_POD} ", ' "$NEW_POD" ')


def _apply_on_node(ns: str, manifest: str) -> str:
    """`kubectl apply` of a manifest whose node selector names the node under drill: the file
    says `NODE` (validated offline as written); the script puts `$NODE` in as it applies."""
    pin = "s|kubernetes.io/hostname: NODE$|kubernetes.io/hostname: '\"$NODE\"'|"
    return f"sed '{pin}' {shlex.quote(manifest)} | kubectl -n {shlex.quote(ns)} apply -f -"


def _q(expr: str) -> str:
    return f'promtool query instant "$PROM" {shlex.quote(expr)}'


def _am(alert: str) -> str:
    return f'amtool --alertmanager.url="$AM" alert query alertname={alert}'


def _bench(out: str, pool: PoolSpec, args: str, key: str = "$INHOUSE_API_KEY") -> str:
    """`inhouse bench` against the drilled pool's model: without `--model`, bench asks for the
    first model of `/v1/models`, another pool's where the stack lists it first or the tenant
    may not use this one."""
    model = shlex.quote(pool.client_model_name)
    # NOTE: the key goes in bench's environment, never its argv (`--api-key`), which any user
    # of the host reads in `ps` for as long as the load runs (two weeks for the soak).
    return (
        f'INHOUSE_API_KEY="{key}" inhouse bench --target "$GATEWAY" --model {model} {args} '
        f"--out drill-out/{out} &"
    )


def drill_steps(name: str, stack: StackSpec, ns: str, load: AgentLoad) -> list[Step]:
    pool = stack.pools[0]
    builders = {
        "kill-replica": _kill_replica,
        "kv-fill": _kv_fill,
        "long-prompt-dos": _long_prompt,
        "bad-signature": _bad_signature,
        "load-not-ready": _load_not_ready,
        "ecc-dbe": _ecc,
        "soak": _soak,
    }
    return builders[name](stack, pool, ns, load)


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
        # A static replica's pod comes back under its name, in its slot.
        ready = ["-n", ns, "wait", "--for=condition=Ready", "pod", "-l", sel, "--timeout=900s"]
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
            [
                f"its pod is Ready before the gateway routes to replica {victim.index}: "
                + _q(routed)
            ],
            kubectl=[ready],
        )
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
    newest = ["-n", ns, "get", "pods", "-l", victim.pods, "--sort-by=.metadata.creationTimestamp",
              "-o", "jsonpath={.items[-1:].metadata.name}"]  # fmt: skip
    new_ip = ["-n", ns, "get", "pod", NEW_POD, "-o", "jsonpath={.status.podIP}"]
    ready = ["-n", ns, "wait", "--for=condition=Ready", "pod", "-l", victim.pods, "--timeout=900s"]
    gateway = ",".join(f"{k}={v}" for k, v in labels(stack, "gateway").items())
    logs = ["-n", ns, "logs", "-l", gateway, "--since=30m", "--prefix"]
    interval = parse_gateway(stack.gateway).discovery.interval_s
    slot = f"replica {pool.name}/N"

    def grep(var: str) -> str:
        # The address as the gateway's URL writes it (IPv6 in brackets): 10.0.0.3 is not
        # 10.0.0.30.
        return (
            f'{_k(logs)} | grep -F -e "//${var}:" -e "//[${var}]:" '
            f"|| echo \"no line of the gateway's log names ${var} "
            f'yet (it looks its pods up every {interval:g} s): run this line again"'
        )

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
            grep("VICTIM_IP"),
            [
                f"'{slot} left: http://$VICTIM_IP:<port> no longer in DNS': slot N was the "
                "victim's, and its rate falls to 0 within the gateway's health window of the kill: "
                + _q(routed)
            ],
            kubectl=[logs],
            promql=[routed],
        ),
    ]
    rejoin = Step(
        "the replacement rejoins only when ready (the pool's pods all Ready); its pod, "
        "address and slot",
        "\n".join(
            [
                _k(ready),
                f"NEW_POD=$({_k(newest)})",
                f"NEW_IP=$({_k(new_ip)})",
                'echo "replacement: pod $NEW_POD at $NEW_IP"',
                grep("NEW_IP"),
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
    return sigkill, rejoin


def _kv_fill(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    kv = f'max(vllm:kv_cache_usage_perc{{namespace="{ns}"}})'
    pre = f'sum(increase(vllm:num_preemptions_total{{namespace="{ns}"}}[10m]))'
    pods = ["-n", ns, "get", "pods", "-l", f"inhouse.dev/pool={pool.name}", "-o", "wide"]
    sessions, at = load.share()
    return [
        Step(
            f"agent load at {at}, and long-context load on top until KV use passes 95%",
            _bench("kv-fill-agent", pool, load.workload(sessions) + " --duration 900")
            + "\n"
            + _bench(
                "kv-fill",
                pool,
                "--workload longctx -p prompt=20000:30000 --concurrency 64 --duration 900",
            ),
            ["KV use >= 0.95: " + _q(kv)],
            promql=[kv],
        ),
        Step(
            "preemption, no crash, the page",
            _q(pre),
            ["preemptions rise", "no restarts: " + _k(pods), _am("InhouseKVCacheFull")],
            kubectl=[pods],
            promql=[pre],
        ),
        Step(
            "recovery",
            "wait  # for both loads to end",
            ["KV use falls below 0.95 and InhouseKVCacheFull resolves: " + _q(kv)],
        ),
    ]


def _long_prompt(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    model = pool.client_model_name
    # one token a word, past the pool's context in any case (`huge_tokens`)
    words = huge_tokens(pool)
    # NOTE: the model name as a JSON (and Python) literal, the program quoted for the shell: a
    # quote in a pool's directory name (its client name without served_model_name) ran the rest.
    body = f'{{"model": {json.dumps(model)}, "prompt": "word " * {words}, "max_tokens": 16}}'
    huge = (
        f"python3 -c {shlex.quote(f'import json; print(json.dumps({body}))')} "
        "| curl -s -o /dev/null "
        # NOTE: the header from a file descriptor, not argv, where `ps` shows the key to all.
        "-w '%{http_code}\\n' -H @<(printf 'Authorization: Bearer %s\\n' \"$INHOUSE_API_KEY\") -H "
        "'content-type: application/json' --data-binary @- \"$GATEWAY/v1/completions\""
    )
    moved = f'sum(increase(vllm:prompt_tokens_total{{namespace="{ns}"}}[2m]))'
    rejected = "sum by (tenant, reason) (increase(inhouse_gateway_rejections_total[5m]))"
    other = (
        "histogram_quantile(0.95, sum by (le, tenant) "
        "(rate(inhouse_gateway_ttft_seconds_bucket[5m])))"
    )
    flood = (
        "--workload longctx -p prompt=32000:32000 -p question=60:60 -p output=16:16 "
        "--rate 10 --duration 300"
    )
    sessions, at = load.share()
    interactive = load.workload(sessions) + " --duration 300"
    return [
        Step(
            f"a {words // 1000}K-token prompt, past the context",
            huge,
            ["prints 400", "engines saw nothing: " + _q(moved)],
            promql=[moved],
        ),
        Step(
            f"the flood from one tenant, interactive traffic at {at} from another",
            _bench("dos-flood", pool, flood, "$FLOOD_KEY")
            + "\n"
            + _bench("dos-interactive", pool, interactive),
            [
                "the flood tenant gets 429: " + _q(rejected),
                f"the other tenant's p95 TTFT within {ttft_slo_ms(pool) * 1.1:.0f} ms: "
                + _q(other),
            ],
            promql=[rejected, other],
        ),
    ]


# Flips one byte of the drill's copy, never of a file outside it (argv[1]: the copy).
_FLIP_ONE_BYTE = "; ".join(
    [
        "import glob, os, sys",
        "d = sys.argv[1]",
        'p = sorted(glob.glob(os.path.join(glob.escape(d), "*.safetensors")))[0]',
        "real = os.path.realpath(d) + os.sep",
        "assert not os.path.islink(d) and os.path.realpath(p).startswith(real), p",
        'f = open(p, "r+b")',
        "f.seek(1 << 20)",
        "b = f.read(1)",
        "f.seek(1 << 20)",
        "f.write(bytes([b[0] ^ 1]))",
    ]
)


def drill_weights(pool: PoolSpec) -> tuple[str, str, str]:
    """The bad-signature drill's paths under the models mount: (the pool's weights on the node,
    their signature, the altered copy; its signature is the copy's path + `.sig`). A registry
    pool's weights are the cache's verified model (`registry/sha256/<hex>`, or the by-name link
    to it), its signature beside the by-name link; the copy goes outside the cache."""
    source = model_dir(pool).removeprefix(f"{MODELS_MOUNT}/")
    weights = pool.weights
    if weights is not None and weights.registry is not None:
        assert weights.name is not None and weights.revision is not None, "model_dir checked"
        by_name = by_name_path(weights.name, weights.revision)
        cache = REGISTRY_CACHE.removeprefix(f"{MODELS_MOUNT}/")
        return source, f"{cache}/{by_name}.sig", f"drill-copies/{pool.name}"
    return source, f"{source}.sig", f"{source}-drill"


def _bad_signature(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    options = RenderOptions()
    models = options.models_host_path
    source, signature, copy_rel = drill_weights(pool)
    on_node = {k: f"{models}/{v}" for k, v in (("source", source), ("sig", signature),
                                               ("copy", copy_rel))}  # fmt: skip
    q = shlex.quote
    drill_copy = on_node["copy"]
    # NOTE: `cp -L`: a registry pool's weights are a link into the node's cache; `cp -a` copied
    # the link, and the byte meant for the copy was flipped in the verified model itself.
    remove = f"rm -rf {q(drill_copy)} {q(drill_copy + '.sig')}"  # an aborted run's, too
    remote = (
        f"{remove} && mkdir -p {q(str(PurePosixPath(drill_copy).parent))} && "
        f"cp -RLp {q(on_node['source'])} {q(drill_copy)} && "
        f"cp {q(on_node['sig'])} {q(drill_copy + '.sig')} && "
        f"python3 -c {q(_FLIP_ONE_BYTE)} {q(drill_copy)}"
    )
    copy = f'ssh "$NODE" {q(remote)}'
    altered = _verify_pod(ns, copy_rel, f"{copy_rel}.sig", "altered")
    intact = _verify_pod(ns, source, signature, "intact")
    apply_a = ["-n", ns, "apply", "-f", "bad-signature/verify-altered.yaml"]
    apply_i = ["-n", ns, "apply", "-f", "bad-signature/verify-intact.yaml"]
    wait_a = [
        "-n",
        ns,
        "wait",
        "--for=jsonpath={.status.phase}=Failed",
        "pod/drill-verify-altered",
        "--timeout=600s",
    ]
    wait_i = [
        "-n",
        ns,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/drill-verify-intact",
        "--timeout=1800s",
    ]
    logs = ["-n", ns, "logs", "pod/drill-verify-altered"]
    pods = ["drill-verify-altered", "drill-verify-intact"]
    delete = ["-n", ns, "delete", "pod", *pods, "--ignore-not-found"]
    # NOTE: a trap, not a last step: under `set -e` a failed `kubectl wait` ended the script
    # before its clean-up, and the altered weights stayed on the node.
    clean_up = (
        "clean_up() {\n"
        f'  ssh "$NODE" {q(remove)} '
        f'|| echo {q("CLEAN UP BY HAND: " + remove + " on")} "$NODE" >&2\n'
        f"  {_k(delete)} || true\n"
        "}\n"
        "trap clean_up EXIT"
    )
    return [
        Step(
            "on any exit, a failed step too: remove the altered copy and the verify pods (trap)",
            clean_up,
            [f"after the script ends, passed or failed: no {drill_copy} on the node"],
            kubectl=[delete],
        ),
        Step("an altered copy of the weights on the node", copy, ["one byte of one shard flipped"]),
        Step(
            "verify the altered copy as the engine pod's init container does",
            _apply_on_node(ns, apply_a[-1]) + "\n" + _k(wait_a) + "\n" + _k(logs),
            ["the pod fails; its log names the altered file"],
            kubectl=[apply_a, wait_a, logs],
            manifests={"bad-signature/verify-altered.yaml": altered},
        ),
        Step(
            "verify the intact weights",
            _apply_on_node(ns, apply_i[-1]) + "\n" + _k(wait_i),
            ["the pod succeeds"],
            kubectl=[apply_i, wait_i],
            manifests={"bad-signature/verify-intact.yaml": intact},
        ),
    ]


def _verify_pod(ns: str, rel: str, signature: str, which: str) -> dict[str, Any]:
    options = RenderOptions()
    path = f"{MODELS_MOUNT}/{rel}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"drill-verify-{which}",
            "namespace": ns,
            "labels": {"inhouse.dev/drill": "bad-signature"},
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": "NODE"},
            "containers": [
                {
                    "name": "verify",
                    "image": options.signing_image,
                    "args": [
                        "verify",
                        "key",
                        path,
                        "--signature",
                        f"{MODELS_MOUNT}/{signature}",
                        "--public_key",
                        "/keys/key.pub",
                    ],
                    "volumeMounts": [
                        {"name": "models", "mountPath": "/models", "readOnly": True},
                        {"name": "key", "mountPath": "/keys", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "models",
                    "hostPath": {"path": options.models_host_path, "type": "Directory"},
                },
                {"name": "key", "configMap": {"name": "model-signing-public-key"}},
            ],
        },
    }


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


def ecc_rule_test(stack: StackSpec) -> str:
    """A promtool test: a double-bit error on GPU 3 of the node pages, naming GPU and node."""
    alert = next(a for a in gpu_rules(engine_layout(stack)) if a.name == "InhouseGPUDoubleBitECC")
    labels = {
        "gpu": "3",
        "UUID": "GPU-drill-3",
        "modelName": nvml_name(stack.pools[0].gpu),
        "Hostname": "gpu-node-1",
    }
    series = (
        Series(labels, "0 0 0 1 1 1 1 1 1 1", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
        Series(labels, "0x10", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
    )
    case = Case("drill: one double-bit error on GPU 3 of gpu-node-1", "1m", series, "4m", labels)
    drill = dataclasses.replace(alert, cases=(case,))
    return render_rule_tests([drill], RenderOptions().runbook_url, "../prometheus/rules.yaml")


def _ecc(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    victim = last_victim(stack, pool, ns, "ecc-dbe")
    cordon, drain = ecc_remediation(stack, pool, victim.index, NODE)
    server = [[*c, "--dry-run=server"] for c in (cordon, drain)]
    synthetic = (
        'amtool --alertmanager.url="$AM" alert add InhouseGPUDoubleBitECC severity=page '
        'gpu=3 Hostname="$NODE" drill=true --annotation=summary="DRILL: GPU 3 on $NODE '
        'double-bit ECC" --end="$(date -u -d "+10 min" +%Y-%m-%dT%H:%M:%SZ)"'
    )
    return [
        Step(
            "the rule fires on a double-bit error (promtool, offline)",
            "promtool test rules ecc-dbe/ecc_dbe_test.yaml",
            ["SUCCESS: the page carries gpu and Hostname and the runbook link"],
            files={"ecc-dbe/ecc_dbe_test.yaml": ecc_rule_test(stack)},
            rule_test="ecc-dbe/ecc_dbe_test.yaml",
        ),
        Step(
            "the page path: a synthetic page through Alertmanager",
            synthetic,
            ["the on-call receiver gets it, naming GPU and node"],
        ),
        Step(
            "rehearse cordon and drain (server-side dry run)",
            "\n".join(_k(c) for c in server),
            ["the API server accepts both; the drain selects only the replica on the GPU"],
            kubectl=server,
        ),
        Step(
            "for a real fault: cordon and drain",
            "# " + _k(cordon) + "\n# " + _k(drain),
            ["the replica's in-flight requests finish (grace period); file the RMA ticket"],
            kubectl=[cordon, drain],
        ),
    ]


def _soak(stack: StackSpec, pool: PoolSpec, ns: str, load: AgentLoad) -> list[Step]:
    model = pool.client_model_name
    p95 = f'inhouse:time_to_first_token_seconds:p95_5m{{model_name="{model}"}}'
    hits = (
        f'sum(rate(vllm:prefix_cache_hits_total{{namespace="{ns}"}}[1d])) / '
        f'sum(rate(vllm:prefix_cache_queries_total{{namespace="{ns}"}}[1d]))'
    )
    kv = f'avg_over_time(vllm:kv_cache_usage_perc{{namespace="{ns}"}}[1d])'
    rss = f'process_resident_memory_bytes{{namespace="{ns}"}}'
    fds = f'process_open_fds{{namespace="{ns}"}}'
    sessions, at = load.share(SOAK_SHARE)
    return [
        Step(
            f"two weeks at {at}",
            _bench("soak", pool, load.workload(sessions) + " --duration 1209600"),
            ["runs for two weeks"],
        ),
        Step(
            "every day: p95, hit rate, KV use, memory, descriptors",
            "\n".join(_q(e) for e in (p95, hits, kv, rss, fds)),
            ["no metric drifts more than 10% day over day", "RSS and descriptors flat"],
            promql=[p95, hits, kv, rss, fds],
        ),
    ]
