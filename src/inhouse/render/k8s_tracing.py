"""Traces and Grafana's wiring: Tempo receiving OTLP (`k8s/tracing.yaml`) and Grafana's data
sources and dashboard provisioning (`k8s/grafana.yaml`, `grafana/provisioning/`).

Tempo takes OTLP over gRPC on 4317 (vLLM's `--otlp-traces-endpoint`) and HTTP on 4318 (the
gateway's exporter), keeps `observability.trace_retention_days`, reports no usage. Sampling
happens at the source, where it saves the cost: `tracing_env` gives the OpenTelemetry SDK's
standard sampler variables (parent-based trace-id ratio at `tracing.sample_ratio`) for every
process that traces, so a request the gateway samples is sampled downstream too.
"""

from __future__ import annotations

from typing import Any

from inhouse.render.k8s_engine import Doc, labels
from inhouse.render.k8s_logging import loki_url, store_statefulset
from inhouse.render.options import RenderOptions
from inhouse.render.yamltext import dump_documents, dump_yaml
from inhouse.spec.stack import PoolSpec, StackSpec

TEMPO_HTTP_PORT = 3200
OTLP_GRPC_PORT = 4317
OTLP_HTTP_PORT = 4318


def tempo_host(options: RenderOptions) -> str:
    return f"tempo.{options.monitoring_namespace}.svc"


def otlp_grpc_endpoint(options: RenderOptions) -> str:
    """For vLLM's `--otlp-traces-endpoint` (gRPC)."""
    return f"http://{tempo_host(options)}:{OTLP_GRPC_PORT}"


def otlp_http_traces_endpoint(options: RenderOptions) -> str:
    """For the gateway's `otlp_endpoint` (OTLP/HTTP exporter)."""
    return f"http://{tempo_host(options)}:{OTLP_HTTP_PORT}/v1/traces"


def tracing_env(stack: StackSpec) -> list[dict[str, str]]:
    """Container environment that sets the OpenTelemetry SDK's sampler; empty when tracing is
    off."""
    tracing = stack.observability.tracing
    if not tracing.enabled:
        return []
    return [
        {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": f"{tracing.sample_ratio:g}"},
    ]


def tempo_config(stack: StackSpec) -> dict[str, Any]:
    hours = stack.observability.trace_retention_days * 24
    return {
        "server": {"http_listen_port": TEMPO_HTTP_PORT},
        "distributor": {
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": f"0.0.0.0:{OTLP_GRPC_PORT}"},
                        "http": {"endpoint": f"0.0.0.0:{OTLP_HTTP_PORT}"},
                    }
                }
            }
        },
        "ingester": {"max_block_duration": "5m"},
        "compactor": {"compaction": {"block_retention": f"{hours}h"}},
        "storage": {
            "trace": {
                "backend": "local",
                "local": {"path": "/var/tempo/traces"},
                "wal": {"path": "/var/tempo/wal"},
            }
        },
        "usage_report": {"reporting_enabled": False},
    }


def tempo_docs(stack: StackSpec, options: RenderOptions) -> list[Doc]:
    ns = options.monitoring_namespace
    app = {"app.kubernetes.io/name": "tempo", **labels(stack, "monitoring")}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "tempo-config", "namespace": ns, "labels": app},
        "data": {"tempo.yaml": dump_yaml(tempo_config(stack))},
    }
    ports = [
        {"name": "http", "containerPort": TEMPO_HTTP_PORT, "protocol": "TCP"},
        {"name": "otlp-grpc", "containerPort": OTLP_GRPC_PORT, "protocol": "TCP"},
        {"name": "otlp-http", "containerPort": OTLP_HTTP_PORT, "protocol": "TCP"},
    ]
    container = {
        "name": "tempo",
        "image": options.image(options.tempo_image),
        "args": ["-config.file=/etc/tempo/tempo.yaml"],
        "ports": ports,
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/tempo", "readOnly": True},
            {"name": "data", "mountPath": "/var/tempo"},
        ],
    }
    statefulset = store_statefulset("tempo", ns, app, container, "100Gi")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "tempo", "namespace": ns, "labels": app},
        "spec": {
            "selector": app,
            "ports": [
                {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"]}
                for p in ports
            ],
        },
    }
    ratio = stack.observability.tracing.sample_ratio
    return [
        (
            f"Tempo: OTLP in on 4317 (gRPC) and 4318 (HTTP); traces kept "
            f"{stack.observability.trace_retention_days} days; no usage reports.",
            config,
        ),
        (
            f"Sampling is at the source ({ratio:g} of requests, parent-based); Tempo keeps what "
            "it is sent.",
            statefulset,
        ),
        (
            "vLLM sends to tempo:4317, the gateway to tempo:4318/v1/traces; Grafana reads 3200.",
            service,
        ),
    ]


def datasources(options: RenderOptions) -> dict[str, Any]:
    """Grafana's data sources, fixed uids so the trace and log links resolve."""
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "uid": "prometheus",
                "type": "prometheus",
                "access": "proxy",
                "url": options.prometheus_url,
                "isDefault": True,
                "jsonData": {"timeInterval": "15s"},
            },
            {
                "name": "Loki",
                "uid": "loki",
                "type": "loki",
                "access": "proxy",
                "url": loki_url(options),
            },
            {
                "name": "Tempo",
                "uid": "tempo",
                "type": "tempo",
                "access": "proxy",
                "url": f"http://{tempo_host(options)}:{TEMPO_HTTP_PORT}",
                "jsonData": {
                    "tracesToLogsV2": {"datasourceUid": "loki"},
                    "serviceMap": {"datasourceUid": "prometheus"},
                },
            },
        ],
    }


def dashboard_provider(stack: StackSpec) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": f"inhouse-{stack.name}",
                "folder": stack.name,
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "options": {"path": "/var/lib/grafana/dashboards/inhouse"},
            }
        ],
    }


def grafana_docs(stack: StackSpec, options: RenderOptions, dashboards: dict[str, str]) -> list[Doc]:
    ns = options.monitoring_namespace
    sources = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"inhouse-{stack.name}-datasources",
            "namespace": ns,
            "labels": {**labels(stack, "monitoring"), "grafana_datasource": "1"},
        },
        "data": {"inhouse-datasources.yaml": dump_yaml(datasources(options))},
    }
    # NOTE: one ConfigMap per dashboard: kubectl apply keeps each object in an annotation of
    # at most 256 KiB, and the eight boards together pass that with about ten pools.
    boards: list[Doc] = []
    for path, text in dashboards.items():
        name = path.removeprefix("grafana/")
        board = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"inhouse-{stack.name}-dashboard-{name.removesuffix('.json')}",
                "namespace": ns,
                "labels": {**labels(stack, "monitoring"), "grafana_dashboard": "1"},
                "annotations": {"grafana_folder": stack.name},
            },
            "data": {name: text},
        }
        why = f"Dashboard {name}, for the sidecar (label grafana_dashboard); without it use "
        boards.append((why + "grafana/provisioning/.", board))
    why = (
        "Grafana data sources (kube-prometheus-stack's sidecar loads ConfigMaps labelled "
        "grafana_datasource); fixed uids so traces link to logs."
    )
    return [(why, sources), *boards]


def render_tracing_and_grafana(
    stack: StackSpec, options: RenderOptions, dashboards: dict[str, str]
) -> dict[str, str]:
    return {
        "k8s/tracing.yaml": dump_documents(tempo_docs(stack, options)),
        "k8s/grafana.yaml": dump_documents(grafana_docs(stack, options, dashboards)),
        "grafana/provisioning/datasources/inhouse.yaml": dump_yaml(datasources(options)),
        "grafana/provisioning/dashboards/inhouse.yaml": dump_yaml(dashboard_provider(stack)),
    }


def with_tracing(stack: StackSpec, options: RenderOptions) -> StackSpec:
    """The stack with the gateway's `otlp_endpoint` and each pool's
    `knobs.otlp_traces_endpoint` (vLLM's `--otlp-traces-endpoint`, gRPC) pointing at Tempo when
    tracing is on and the stack names none of its own; `tracing.detailed` sets the pools'
    `knobs.collect_detailed_traces` to `all` where unset."""
    tracing = stack.observability.tracing
    if not tracing.enabled:
        return stack
    gateway = stack.gateway
    if not gateway.get("otlp_endpoint"):
        gateway = {**gateway, "otlp_endpoint": otlp_http_traces_endpoint(options)}
    pools = tuple(_traced_pool(pool, options, tracing.detailed) for pool in stack.pools)
    return stack.model_copy(update={"gateway": gateway, "pools": pools})


def _traced_pool(pool: PoolSpec, options: RenderOptions, detailed: bool) -> PoolSpec:
    knobs = pool.knobs
    update: dict[str, str] = {}
    if knobs.otlp_traces_endpoint is None:
        update["otlp_traces_endpoint"] = otlp_grpc_endpoint(options)
    if detailed and knobs.collect_detailed_traces is None:
        update["collect_detailed_traces"] = "all"
    if not update:
        return pool
    return pool.model_copy(update={"knobs": knobs.model_copy(update=update)})


def tracing_notes(
    stack: StackSpec, engine_args: list[list[str]], options: RenderOptions
) -> list[str]:
    """What the operator should know when tracing is on but an engine does not send traces."""
    if not stack.observability.tracing.enabled:
        return []
    if all("--otlp-traces-endpoint" in args for args in engine_args):
        return []
    detailed = (
        " and `--collect-detailed-traces=all` (tracing.detailed)"
        if stack.observability.tracing.detailed
        else ""
    )
    return [
        "tracing is on: the gateway sends its spans to Tempo, but the vLLM arguments carry no "
        f"--otlp-traces-endpoint; add `--otlp-traces-endpoint {otlp_grpc_endpoint(options)}`"
        f"{detailed} to each pool's knobs.extra_args for engine spans"
    ]
