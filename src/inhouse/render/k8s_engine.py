"""Engine manifests: per pool a vLLM StatefulSet (single node: one pod per replica, each with its
own Service) or Deployment (several nodes, scaled by KEDA), a headless Service and a
PodDisruptionBudget; one NetworkPolicy that lets only the gateway (and Prometheus) reach the
engines.

A single node's pool is a StatefulSet, not one Deployment per replica: `kubectl apply` of a
changed pod template (a new vLLM image, an argument) would roll every replica's Deployment at
once and take the pool down for a whole model load. The StatefulSet's RollingUpdate replaces
one pod at a time, from the highest ordinal down, and waits for it to be Ready before the next.

The pod template carries everything the seeds ask of an LLM engine pod: GPU limits, a node selector
by GPU product, a startupProbe whose window covers model loading, readiness and liveness on
/health, a preStop sleep so endpoints drop the pod before vLLM drains, a grace period that covers
both, /dev/shm in memory, weights read-only from the node's NVMe, and init containers that pull
and verify the model's signature (OpenSSF model-signing; k8s_init.py) and check that the GPUs it
got are NVLink-joined.
"""

from __future__ import annotations

from typing import Any

from inhouse.launch.engine_args import ENGINE_KEEP_ALIVE_S, KEEP_ALIVE_ENV
from inhouse.render import layout
from inhouse.render.k8s_init import TOPOLOGY_CHECK, init_containers
from inhouse.render.layout import EngineLayout, EngineUnit
from inhouse.render.options import RenderOptions
from inhouse.render.vllm import explained_flags, kubernetes_args
from inhouse.render.yamltext import annotate_list_items, dump_documents
from inhouse.spec.stack import PoolSpec, StackSpec

Doc = tuple[str, dict[str, Any]]


def labels(stack: StackSpec, component: str, **extra: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/part-of": stack.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "inhouse",
        **extra,
    }


def namespace_of(stack: StackSpec, options: RenderOptions) -> str:
    return options.namespace or stack.name


def render_engines(
    stack: StackSpec, engines: EngineLayout, options: RenderOptions
) -> dict[str, str]:
    """`k8s/engine-<pool>.yaml` per pool and `k8s/engine-networkpolicy.yaml`."""
    files = {}
    for pool in engines.pools:
        units = engines.units_of(pool)
        docs: list[Doc] = []
        if all(unit.replica_index is not None for unit in units):
            docs.append(engine_statefulset(stack, units, options))
            docs += [replica_service(stack, unit, options) for unit in units]
        else:
            docs += [engine_deployment(stack, engines, unit, options) for unit in units]
        docs.append(pool_service(stack, pool, options))
        docs.append(pool_pdb(stack, pool, options))
        notes = {f.flag: f.why for f in explained_flags(stack, pool, options.engine_port)}
        text = annotate_list_items(dump_documents(docs), notes)
        files[f"k8s/engine-{pool.name}.yaml"] = text
    files["k8s/engine-networkpolicy.yaml"] = dump_documents([engine_network_policy(stack, options)])
    return files


def engine_deployment(
    stack: StackSpec, engines: EngineLayout, unit: EngineUnit, options: RenderOptions
) -> Doc:
    """A scaled pool: one Deployment that KEDA scales."""
    pool = unit.pool
    pod_labels = labels(stack, "engine", **{"inhouse.dev/pool": pool.name})
    template, window, grace_why = pod_template(stack, pool, pod_labels, {}, options, is_scaled=True)
    template["spec"]["affinity"] = spread_replicas(pod_labels)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": unit.name,
            "namespace": namespace_of(stack, options),
            "labels": pod_labels,
        },
        "spec": {
            "replicas": unit.replicas,
            # NOTE: GPUs are the scarce resource: never surge, replace one replica at a time.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "selector": {"matchLabels": pod_labels},
            "template": template,
        },
    }
    high = layout.max_replicas(stack, engines, pool)
    lines = [
        f"Engine {unit.name}: {pool.model} as {pool.client_model_name!r}, TP={pool.tp}.",
        f"Scaled by KEDA from {pool.replicas} to {high} replicas "
        "on vllm:num_requests_waiting (autoscaling.yaml).",
    ]
    return _with_probe_notes(lines, *window, grace_why), deployment


def engine_statefulset(stack: StackSpec, units: list[EngineUnit], options: RenderOptions) -> Doc:
    """A single node's pool: one StatefulSet, pod `<pool>-<i>` being replica i."""
    pool = units[0].pool
    pod_labels = labels(stack, "engine", **{"inhouse.dev/pool": pool.name})
    annotations = {}
    if any(unit.gpu_ids for unit in units):
        # NOTE: for humans; the device plugin assigns the GPUs (statefulset_comment).
        annotations["inhouse.dev/gpu-ids"] = ";".join(
            ",".join(map(str, unit.gpu_ids)) for unit in units
        )
    template, window, grace_why = pod_template(
        stack, pool, pod_labels, annotations, options, is_scaled=False
    )
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": units[0].workload,
            "namespace": namespace_of(stack, options),
            "labels": pod_labels,
        },
        "spec": {
            "replicas": len(units),
            "serviceName": f"{pool.name}-engine",
            # First start and scaling load every replica together; updates are not affected.
            "podManagementPolicy": "Parallel",
            # NOTE: one pod at a time, highest ordinal first, each Ready before the next: a
            # changed template never takes the pool down. GPUs are the scarce resource: a
            # StatefulSet never surges, the new pod takes the old one's GPUs.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "selector": {"matchLabels": pod_labels},
            "template": template,
        },
    }
    return statefulset_comment(pool, units, *window, grace_why), statefulset


def pod_template(
    stack: StackSpec,
    pool: PoolSpec,
    pod_labels: dict[str, str],
    annotations: dict[str, str],
    options: RenderOptions,
    *,
    is_scaled: bool,
) -> tuple[dict[str, Any], tuple[int, str], str]:
    """The engine pod, the startupProbe window and its arithmetic, and the grace period's."""
    window_s, window_why = layout.startup_window_s(pool)
    prestop_s, _ = layout.engine_prestop_s(
        stack, is_scaled, options.prestop_sleep_s, options.dns_ttl_s
    )
    grace_s, grace_why = layout.termination_grace_s(stack, pool, prestop_s)
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace_s,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {"nvidia.com/gpu.product": layout.gpu_product_label(pool.gpu)},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "initContainers": init_containers(pool, options),
        "containers": [vllm_container(stack, pool, options, window_s, prestop_s)],
        "volumes": volumes(pool, options),
    }
    template = {
        "metadata": {
            "labels": pod_labels,
            "annotations": {"kubectl.kubernetes.io/default-container": "vllm", **annotations},
        },
        "spec": pod_spec,
    }
    return template, (window_s, window_why), grace_why


def statefulset_comment(
    pool: PoolSpec, units: list[EngineUnit], window_s: int, window_why: str, grace_why: str
) -> str:
    lines = [
        f"Engine {units[0].workload}: {pool.model} as {pool.client_model_name!r}, TP={pool.tp}.",
        f"Static layout: pod {units[0].workload}-<i> is replica i of {pool.replicas}, reached "
        "through its own Service of that name.",
        "An update (kubectl apply of a changed template) replaces one pod at a time, highest "
        "first, and waits",
        "for it to be Ready before the next: the other replicas keep serving while it loads. "
        "A new pod that",
        "never gets Ready stops the rollout; fix the template, apply, and delete that pod.",
    ]
    if any(unit.gpu_ids for unit in units):
        groups = "; ".join(f"{unit.name} on {','.join(map(str, unit.gpu_ids))}" for unit in units)
        lines += [
            f"NVLink groups (gpu_ids): {groups}.",
            f"The device plugin assigns the {pool.tp} GPUs (CUDA_VISIBLE_DEVICES of host indices "
            "would be wrong inside",
            "the container); the kubelet's Topology Manager at single-numa-node takes them from "
            "one NUMA node,",
            "which on an HGX board is one NVLink half, and the check-gpu-topology init container "
            "refuses to",
            "start the engine on GPUs that are not NVLink-joined. Bare metal: vllm/"
            f"{pool.name}.sh sets CUDA_VISIBLE_DEVICES per replica.",
        ]
    return _with_probe_notes(lines, window_s, window_why, grace_why)


def _with_probe_notes(lines: list[str], window_s: int, window_why: str, grace_why: str) -> str:
    lines = [
        *lines,
        f"startupProbe window {window_s} s: {window_why}.",
        f"terminationGracePeriodSeconds {grace_why}.",
    ]
    return "\n".join(lines)


def vllm_container(
    stack: StackSpec, pool: PoolSpec, options: RenderOptions, window_s: int, prestop_s: int
) -> dict[str, Any]:
    args = kubernetes_args(stack, pool, layout.model_dir(pool), options.engine_port)
    health = {"path": "/health", "port": "http"}
    resources = engine_resources(pool)
    return {
        "name": "vllm",
        "image": options.image(options.vllm_image),
        "imagePullPolicy": "IfNotPresent",
        "command": ["vllm", "serve"],
        "args": args,
        "env": [
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
            {"name": "VLLM_NO_USAGE_STATS", "value": "1"},
            {"name": "DO_NOT_TRACK", "value": "1"},
            {"name": KEEP_ALIVE_ENV, "value": str(ENGINE_KEEP_ALIVE_S)},
        ],
        "ports": [{"name": "http", "containerPort": options.engine_port, "protocol": "TCP"}],
        "resources": {"requests": resources, "limits": resources},
        "volumeMounts": [
            {"name": "models", "mountPath": layout.MODELS_MOUNT, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
        # Model load is not readiness: liveness and readiness wait until /health first answers.
        "startupProbe": {
            "httpGet": health,
            "periodSeconds": layout.PROBE_PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": window_s // layout.PROBE_PERIOD_S,
        },
        "readinessProbe": {
            "httpGet": health,
            "periodSeconds": 10,
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": health,
            "periodSeconds": 30,
            "timeoutSeconds": 10,
            "failureThreshold": 3,
        },
        # /health stays 200 while vLLM drains, so the pod leaves the endpoints (and, for a
        # scaled pool, the gateway's DNS view) by this sleep, before SIGTERM starts the
        # --shutdown-timeout drain (`layout.engine_prestop_s`).
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(prestop_s)]}}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }


def engine_resources(pool: PoolSpec) -> dict[str, str | int]:
    return {
        "cpu": str(layout.cpu_cores(pool)),
        "memory": f"{layout.memory_gib(pool)}Gi",
        "nvidia.com/gpu": pool.tp,
    }


def volumes(pool: PoolSpec, options: RenderOptions) -> list[dict[str, Any]]:
    return [
        {"name": "models", "hostPath": {"path": options.models_host_path, "type": "Directory"}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{layout.shm_gib(pool)}Gi"}},
        # The public key comes from a ConfigMap the operator creates; no key in these manifests.
        {"name": "signing-key", "configMap": {"name": options.signing_public_key_configmap}},
    ]


def spread_replicas(pod_labels: dict[str, str]) -> dict[str, Any]:
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": pod_labels},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def replica_service(stack: StackSpec, unit: EngineUnit, options: RenderOptions) -> Doc:
    pool_labels = labels(stack, "engine", **{"inhouse.dev/pool": unit.pool.name})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": unit.name,
            "namespace": namespace_of(stack, options),
            "labels": {**pool_labels, "inhouse.dev/replica": str(unit.replica_index)},
        },
        "spec": {
            "selector": {**pool_labels, layout.POD_NAME_LABEL: unit.name},
            "ports": [{"name": "http", "port": options.engine_port, "targetPort": "http"}],
        },
    }
    why = (
        f"Stable address of replica {unit.replica_index} (pod {unit.name}) for the gateway: it "
        "drops the pod from its endpoints as soon as it terminates."
    )
    return why, service


def pool_service(stack: StackSpec, pool: PoolSpec, options: RenderOptions) -> Doc:
    selector = labels(stack, "engine", **{"inhouse.dev/pool": pool.name})
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{pool.name}-engine",
            "namespace": namespace_of(stack, options),
            "labels": {**selector, "inhouse.dev/scrape": "engine"},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": selector,
            "ports": [{"name": "http", "port": options.engine_port, "targetPort": "http"}],
        },
    }
    why = (
        f"Headless Service of pool {pool.name}: DNS lists its ready replicas (the gateway's "
        "discovery) and the ServiceMonitor scrapes each one; Prometheus names the job after it."
    )
    return why, service


def disruption_budget(name: str, ns: str, pod_labels: dict[str, str]) -> dict[str, Any]:
    """A PodDisruptionBudget: voluntary disruptions (drains) take one pod of `name` at a time."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": pod_labels}},
    }


def locked_down(uid: int) -> dict[str, Any]:
    """A container's securityContext for a proxy: user and group `uid`, no root, no
    privilege escalation, no capabilities, a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "capabilities": {"drop": ["ALL"]},
    }


def pool_pdb(stack: StackSpec, pool: PoolSpec, options: RenderOptions) -> Doc:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{pool.name}-engine", "namespace": namespace_of(stack, options)},
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": labels(stack, "engine", **{"inhouse.dev/pool": pool.name})},
        },
    }
    return "Voluntary disruptions (node drains) take one replica of the pool at a time.", pdb


def engine_network_policy(stack: StackSpec, options: RenderOptions) -> Doc:
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": "engines-from-gateway-only",
            "namespace": namespace_of(stack, options),
        },
        "spec": {
            "podSelector": {"matchLabels": labels(stack, "engine")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {"podSelector": {"matchLabels": labels(stack, "gateway")}},
                        {
                            "namespaceSelector": {
                                "matchLabels": {
                                    "kubernetes.io/metadata.name": options.monitoring_namespace
                                }
                            }
                        },
                    ],
                    "ports": [{"protocol": "TCP", "port": options.engine_port}],
                }
            ],
        },
    }
    why = (
        "Only the gateway reaches the engines (they have no auth of their own); Prometheus in "
        f"namespace {options.monitoring_namespace} may scrape /metrics on the same port."
    )
    return why, policy


__all__ = ["TOPOLOGY_CHECK", "render_engines"]  # TOPOLOGY_CHECK: tests read it here
