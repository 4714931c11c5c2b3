"""Namespace, gateway, monitoring and autoscaling manifests.

The gateway gets its stack file and engine endpoints from a ConfigMap and its tenant keys from a
Secret the operator creates (`kubectl create secret generic ...`): no key material is rendered.
Monitoring assumes the Prometheus Operator (ServiceMonitor, PrometheusRule) and the NVIDIA GPU
Operator's dcgm-exporter; multi-node pools scale with KEDA on vLLM's waiting-queue gauge.
"""

from __future__ import annotations

import json
from typing import Any

from inhouse.errors import SpecError
from inhouse.metric_names import DCGM_METRICS
from inhouse.render import layout
from inhouse.render.alerts import rule_groups
from inhouse.render.k8s_edge import edge_docs, gateway_section_for_cluster
from inhouse.render.k8s_engine import Doc, disruption_budget, labels, locked_down, namespace_of
from inhouse.render.k8s_tracing import tracing_env
from inhouse.render.layout import EngineLayout
from inhouse.render.options import RenderOptions
from inhouse.render.prometheus import Rules
from inhouse.render.yamltext import dump_documents
from inhouse.spec.gateway import check_no_secrets, parse_gateway
from inhouse.spec.stack import StackSpec, dump_stack


def namespace_doc(stack: StackSpec, options: RenderOptions) -> Doc:
    ns = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace_of(stack, options), "labels": labels(stack, "namespace")},
    }
    return f"Stack {stack.name}: everything but the DCGM collectors lives here.", ns


def endpoints(stack: StackSpec, engines: EngineLayout, options: RenderOptions) -> dict[str, Any]:
    """What the gateway's `--endpoints` file says, for this cluster: per pool the replica URLs
    (static layout: one Service per replica, named after its StatefulSet pod), or the pool's
    headless Service (scaled pools: `discovery` says to resolve it for the current replicas, in
    up to the autoscaler's `maxReplicaCount` slots; the `pools` URL is for gateways that
    predate discovery)."""
    ns = namespace_of(stack, options)
    port = options.engine_port
    pools: dict[str, list[str]] = {}
    discovery: dict[str, dict[str, Any]] = {}
    for pool in stack.pools:
        if stack.engine_of(pool) == "url":
            pools[pool.name] = list(pool.urls)
            continue
        mine = engines.units_of(pool)
        if all(u.replica_index is not None for u in mine):
            pools[pool.name] = [f"http://{u.name}.{ns}.svc:{port}" for u in mine]
        else:
            host = f"{pool.name}-engine.{ns}.svc.cluster.local"
            pools[pool.name] = [f"http://{host}:{port}"]
            high = layout.max_replicas(stack, engines, pool)  # the ScaledObject's maximum
            # NOTE: absolute (the trailing dot). A pod's resolv.conf has ndots:5, so the
            # relative name (four dots) is first tried under every search domain, the node's
            # own included: the lookup every few seconds costs several NXDOMAINs first, and
            # a wildcard record in a corporate search domain would answer for the pool.
            discovery[pool.name] = {"dns": f"{host}.", "port": port, "max_replicas": high}
    data: dict[str, Any] = {"pools": pools}
    if discovery:
        data["discovery"] = discovery
    return data


def gateway_grace_s(stack: StackSpec, options: RenderOptions) -> int:
    """Streams in flight finish: preStop sleep (the drain from the Service), then the longest of
    the gateway's own drain (`proxy.drain_timeout_s`), the engines' and the plan's p95 e2e of
    any workload, then teardown."""
    return options.prestop_sleep_s + layout.gateway_inflight_s(stack) + layout.TEARDOWN_MARGIN_S


def gateway_docs(stack: StackSpec, engines: EngineLayout, options: RenderOptions) -> list[Doc]:
    check_no_secrets(stack.gateway)
    ns = namespace_of(stack, options)
    pod_labels = labels(stack, "gateway")
    spec = parse_gateway(stack.gateway)
    replicas, metrics_port = spec.replicas, spec.metrics_port
    if not metrics_port:
        raise SpecError("gateway.metrics_port: 0 (any free port) cannot be scraped in a cluster")
    container = _gateway_container(stack, options, metrics_port)
    limits_note = (
        "Several replicas share rate limits and budgets through Redis (gateway.redis_url)."
        if replicas > 1
        else "One replica keeps limits in process; set gateway.replicas and redis_url for HA."
    )
    return [
        (
            "Gateway configuration: the stack file and where each pool's engines answer.",
            _gateway_config(stack, engines, options, ns, pod_labels),
        ),
        (
            f"The tenant-aware gateway. Tenant API keys come from Secret {options.gateway_secret} "
            "(not rendered: kubectl -n NS create secret generic "
            f"{options.gateway_secret} --from-file=tenants.yaml). {limits_note}",
            _gateway_deployment(stack, options, ns, replicas, container),
        ),
        (
            "Envoy (k8s/edge.yaml) reaches the gateway here (port 80); Prometheus scrapes "
            f"/metrics on port {metrics_port}.",
            _gateway_service(ns, pod_labels, metrics_port),
        ),
        (
            "Voluntary disruptions take one gateway replica at a time.",
            disruption_budget("gateway", ns, pod_labels),
        ),
    ]


def _gateway_config(
    stack: StackSpec,
    engines: EngineLayout,
    options: RenderOptions,
    ns: str,
    pod_labels: dict[str, str],
) -> dict[str, Any]:
    """The gateway's ConfigMap: its stack file (the gateway section as in the cluster) and the
    endpoints file."""
    in_cluster = stack.model_copy(update={"gateway": gateway_section_for_cluster(stack)})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gateway-config", "namespace": ns, "labels": pod_labels},
        "data": {
            "stack.yaml": dump_stack(in_cluster),
            "endpoints.json": json.dumps(endpoints(stack, engines, options), indent=2) + "\n",
        },
    }


def _gateway_container(
    stack: StackSpec, options: RenderOptions, metrics_port: int
) -> dict[str, Any]:
    health = {"path": "/health", "port": "http"}
    return {
        "name": "gateway",
        "image": options.image(options.gateway_image),
        "imagePullPolicy": "IfNotPresent",
        "command": ["inhouse", "gateway"],
        "args": [
            "--stack",
            "/etc/inhouse/stack.yaml",
            "--endpoints",
            "/etc/inhouse/endpoints.json",
            "--host",
            "0.0.0.0",
            "--port",
            str(options.gateway_port),
        ],
        "env": [
            {"name": "INHOUSE_SECRETS_DIR", "value": "/etc/inhouse/secrets"},
            *tracing_env(stack),  # OpenTelemetry's sampler, when tracing is on
        ],
        "ports": [
            {"name": "http", "containerPort": options.gateway_port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": metrics_port, "protocol": "TCP"},
        ],
        "resources": {
            "requests": {"cpu": "2", "memory": "2Gi"},
            "limits": {"cpu": "4", "memory": "4Gi"},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/inhouse", "readOnly": True},
            {"name": "secrets", "mountPath": "/etc/inhouse/secrets", "readOnly": True},
        ],
        "readinessProbe": {"httpGet": health, "periodSeconds": 5, "failureThreshold": 2},
        "livenessProbe": {"httpGet": health, "periodSeconds": 15, "failureThreshold": 4},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(options.prestop_sleep_s)]}}},
        "securityContext": locked_down(10001),
    }


def _gateway_deployment(
    stack: StackSpec, options: RenderOptions, ns: str, replicas: int, container: dict[str, Any]
) -> dict[str, Any]:
    pod_labels = labels(stack, "gateway")
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gateway", "namespace": ns, "labels": pod_labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "terminationGracePeriodSeconds": gateway_grace_s(stack, options),
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "gateway-config"}},
                        {"name": "secrets", "secret": {"secretName": options.gateway_secret}},
                    ],
                },
            },
        },
    }


def _gateway_service(ns: str, pod_labels: dict[str, str], metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "gateway",
            "namespace": ns,
            "labels": {**pod_labels, "inhouse.dev/scrape": "gateway"},
        },
        "spec": {
            "selector": pod_labels,
            "ports": [
                {"name": "http", "port": 80, "targetPort": "http"},
                {"name": "metrics", "port": metrics_port, "targetPort": "metrics"},
            ],
        },
    }


def monitoring_docs(stack: StackSpec, rules: Rules, options: RenderOptions) -> list[Doc]:
    """The ServiceMonitors and the PrometheusRule of `rules` (`prometheus.stack_rules`)."""
    ns = namespace_of(stack, options)
    recordings, alerts = rules
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "inhouse", "namespace": ns, "labels": labels(stack, "monitoring")},
        "spec": {"groups": rule_groups(recordings, alerts, options.runbook_url)},
    }
    return [
        (
            "Scrape every engine replica every 15 s (the replica-down alert needs 30 s); the "
            "job is the pool's headless Service, and pool/replica labels come from the pod.",
            _service_monitor(stack, ns, "engine"),
        ),
        (
            "Scrape the gateway's inhouse_gateway_* metrics on its metrics port (never the API "
            "port: they name tenants and their token counts).",
            _service_monitor(stack, ns, "gateway"),
        ),
        ("The same rules as prometheus/rules.yaml, for the Prometheus Operator.", rule),
    ]


def _engine_relabelings() -> list[dict[str, Any]]:
    """The engines' pool and replica labels, from the pod."""
    return [
        {"sourceLabels": ["__meta_kubernetes_pod_label_inhouse_dev_pool"], "targetLabel": "pool"},
        # A static replica is pod `<pool>-<i>` of its pool's StatefulSet: replica i, as the
        # gateway labels it. A scaled pool's pods (a Deployment's) get no replica label.
        {
            "sourceLabels": [
                "__meta_kubernetes_pod_controller_kind",
                "__meta_kubernetes_pod_name",
            ],
            "separator": ";",
            "regex": "StatefulSet;.+-([0-9]+)",
            "replacement": "$1",
            "targetLabel": "replica",
        },
    ]


def _service_monitor(stack: StackSpec, ns: str, target: str) -> dict[str, Any]:
    """The ServiceMonitor `<target>s` of the Services labelled `inhouse.dev/scrape: <target>`:
    the engines on their API port (with pool and replica labels), the gateway on its metrics
    port."""
    endpoint: dict[str, Any] = {
        "port": "http" if target == "engine" else "metrics",
        "path": "/metrics",
        "interval": "15s",
        "scrapeTimeout": "10s",
    }
    if target == "engine":
        endpoint["relabelings"] = _engine_relabelings()
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": f"{target}s", "namespace": ns, "labels": labels(stack, "monitoring")},
        "spec": {
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/part-of": stack.name,
                    "inhouse.dev/scrape": target,
                }
            },
            "namespaceSelector": {"matchNames": [ns]},
            "endpoints": [endpoint],
        },
    }


def dcgm_counters(options: RenderOptions) -> Doc:
    rows = [f"{f.name}, {f.kind}, {f.help}" for f in DCGM_METRICS]
    csv = (
        "# Format: DCGM field, Prometheus type, help. Rendered by inhouse.\n"
        + "\n".join(rows)
        + "\n"
    )
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dcgm-exporter-counters", "namespace": options.dcgm_namespace},
        "data": {"dcgm-metrics.csv": csv},
    }
    why = (
        "dcgm-exporter collectors: the defaults plus the double-bit ECC counter, XID counts and "
        "throttle counters the alerts need (commented out upstream). GPU Operator: set "
        "dcgmExporter.config.name=dcgm-exporter-counters."
    )
    return why, config


def autoscaling_docs(stack: StackSpec, engines: EngineLayout, options: RenderOptions) -> list[Doc]:
    ns = namespace_of(stack, options)
    docs = []
    for unit in engines.units:
        if unit.replica_index is not None:
            continue
        pool = unit.pool
        high = layout.max_replicas(stack, engines, pool)
        selector = f'namespace="{ns}",model_name="{pool.client_model_name}"'
        query = f"sum(vllm:num_requests_waiting{{{selector}}})"
        scaled = {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {
                "name": unit.name,
                "namespace": ns,
                "labels": labels(stack, "autoscaling"),
            },
            "spec": {
                "scaleTargetRef": {"name": unit.name},
                "minReplicaCount": pool.replicas,
                "maxReplicaCount": high,
                "pollingInterval": 15,
                "cooldownPeriod": 300,
                "fallback": {"failureThreshold": 3, "replicas": pool.replicas},
                "advanced": {
                    "horizontalPodAutoscalerConfig": {
                        "behavior": {
                            "scaleUp": {
                                "stabilizationWindowSeconds": 60,
                                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
                            },
                            "scaleDown": {
                                "stabilizationWindowSeconds": 300,
                                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}],
                            },
                        }
                    }
                },
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {
                            "serverAddress": options.prometheus_url,
                            "query": query,
                            "threshold": str(layout.QUEUE_DEPTH_PER_REPLICA),
                        },
                    }
                ],
            },
        }
        why = (
            f"Pool {pool.name}: one more replica per {layout.QUEUE_DEPTH_PER_REPLICA} waiting "
            f"requests (vLLM's own gauge, selected by its model_name label), {pool.replicas}.."
            f"{high} replicas (the nodes' free GPUs / TP {pool.tp}); up after 60 s, down one per "
            "5 minutes."
        )
        docs.append((why, scaled))
    return docs


def render_cluster(
    stack: StackSpec, engines: EngineLayout, rules: Rules, options: RenderOptions
) -> dict[str, str]:
    files = {
        "k8s/namespace.yaml": dump_documents([namespace_doc(stack, options)]),
        "k8s/gateway.yaml": dump_documents(gateway_docs(stack, engines, options)),
        "k8s/edge.yaml": dump_documents(edge_docs(stack, options)),
        "k8s/monitoring.yaml": dump_documents(monitoring_docs(stack, rules, options)),
        "k8s/dcgm-exporter-counters.yaml": dump_documents([dcgm_counters(options)]),
    }
    scaling = autoscaling_docs(stack, engines, options)
    if scaling:
        files["k8s/autoscaling.yaml"] = dump_documents(scaling)
    return files
