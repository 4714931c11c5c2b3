"""The hardware's exporters and the scrape Services: `k8s/exporters.yaml`.

* dcgm-exporter as a DaemonSet on the GPU nodes, reading the collectors CSV with the counters
  the alerts need (ECC, XID, temperature, power, SM and DRAM activity, throttling), in
  Kubernetes mode so each GPU carries the pod that holds it. A cluster whose NVIDIA GPU
  Operator already runs dcgm-exporter keeps one of the two (`dcgmExporter.enabled=false`).
* node_exporter as a DaemonSet on every node (CPU, memory, the NVMe weight cache, network).
* Headless Services for both and for the gateway's metrics port: one A record per ready pod,
  which the rendered prometheus.yml scrapes by DNS; ServiceMonitors for the Operator.
"""

from __future__ import annotations

from typing import Any

from inhouse.render.k8s_cluster import dcgm_counters
from inhouse.render.k8s_engine import Doc, labels, namespace_of
from inhouse.render.options import RenderOptions
from inhouse.render.prometheus_config import (
    DCGM_PORT,
    GATEWAY_SCRAPE_SERVICE,
    NODE_EXPORTER_PORT,
    gateway_metrics_port,
)
from inhouse.render.yamltext import dump_documents
from inhouse.spec.stack import StackSpec

DCGM_CONFIGMAP = "dcgm-exporter-counters"


def _app(name: str, stack: StackSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, **labels(stack, "monitoring")}


def headless_service(
    name: str, namespace: str, selector: dict[str, str], port: int, port_name: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": selector},
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            "ports": [{"name": port_name, "port": port, "targetPort": port_name}],
        },
    }


def service_monitor(
    name: str, namespace: str, selector: dict[str, str], port_name: str, honor_labels: bool
) -> dict[str, Any]:
    endpoint: dict[str, Any] = {"port": port_name, "path": "/metrics", "interval": "15s"}
    if honor_labels:
        endpoint["honorLabels"] = True
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": name, "namespace": namespace, "labels": selector},
        "spec": {
            "selector": {"matchLabels": selector},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [endpoint],
        },
    }


def daemonset(
    name: str, namespace: str, pod_labels: dict[str, str], pod_spec: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": pod_labels},
        "spec": {
            "selector": {"matchLabels": pod_labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }


def dcgm_docs(stack: StackSpec, options: RenderOptions) -> list[Doc]:
    ns = options.monitoring_namespace
    pod_labels = _app("dcgm-exporter", stack)
    why, counters = dcgm_counters(options)
    counters = {**counters, "metadata": {"name": DCGM_CONFIGMAP, "namespace": ns}}
    return [
        (
            why.replace(
                "GPU Operator: set dcgmExporter.config.name=dcgm-exporter-counters.",
                "This copy is for the DaemonSet below.",
            ),
            counters,
        ),
        (
            "dcgm-exporter on every GPU node (GPU feature discovery labels them "
            "nvidia.com/gpu.present); in Kubernetes mode each GPU's series carry the pod that "
            "holds it. With the GPU Operator's own dcgm-exporter, keep only one.",
            daemonset("dcgm-exporter", ns, pod_labels, _dcgm_pod_spec(options)),
        ),
        (
            "One A record per exporter pod: prometheus.yml scrapes them by DNS.",
            headless_service("dcgm-exporter", ns, pod_labels, DCGM_PORT, "metrics"),
        ),
        (
            "honorLabels keeps the exporter's pod/namespace labels: the GPU's user, not the "
            "exporter.",
            service_monitor("dcgm-exporter", ns, pod_labels, "metrics", honor_labels=True),
        ),
    ]


def _dcgm_pod_spec(options: RenderOptions) -> dict[str, Any]:
    """On every GPU node (tolerating the GPU taint): the collectors CSV from the ConfigMap and
    the kubelet's pod-resources socket, which maps each GPU to its pod."""
    return {
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "automountServiceAccountToken": False,
        "containers": [_dcgm_container(options)],
        "volumes": [
            {"name": "counters", "configMap": {"name": DCGM_CONFIGMAP}},
            {
                "name": "pod-resources",
                "hostPath": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
            },
        ],
    }


def _dcgm_container(options: RenderOptions) -> dict[str, Any]:
    return {
        "name": "dcgm-exporter",
        "image": options.image(options.dcgm_exporter_image),
        "args": ["-f", "/etc/dcgm-exporter/dcgm-metrics.csv", "-a", f":{DCGM_PORT}"],
        "env": [
            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": DCGM_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/health", "port": "metrics"}, "periodSeconds": 10},
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "512Mi"},
        },
        # Profiling fields (DCGM_FI_PROF_*: SM, tensor and DRAM activity) need SYS_ADMIN.
        "securityContext": {"runAsNonRoot": False, "capabilities": {"add": ["SYS_ADMIN"]}},
        "volumeMounts": [
            {"name": "counters", "mountPath": "/etc/dcgm-exporter", "readOnly": True},
            {
                "name": "pod-resources",
                "mountPath": "/var/lib/kubelet/pod-resources",
                "readOnly": True,
            },
        ],
    }


def node_exporter_docs(stack: StackSpec, options: RenderOptions) -> list[Doc]:
    ns = options.monitoring_namespace
    pod_labels = _app("node-exporter", stack)
    container = {
        "name": "node-exporter",
        "image": options.image(options.node_exporter_image),
        "args": ["--path.rootfs=/host", f"--web.listen-address=:{NODE_EXPORTER_PORT}"],
        "ports": [{"name": "metrics", "containerPort": NODE_EXPORTER_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
        "volumeMounts": [
            {
                "name": "root",
                "mountPath": "/host",
                "readOnly": True,
                "mountPropagation": "HostToContainer",
            },
        ],
    }
    pod_spec = {
        "hostPID": True,
        "automountServiceAccountToken": False,
        "tolerations": [{"operator": "Exists"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
        "containers": [container],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    }
    return [
        (
            "node_exporter on every node: CPU, memory, filesystems (the NVMe weight cache), "
            "network; the host's root is mounted read-only.",
            daemonset("node-exporter", ns, pod_labels, pod_spec),
        ),
        (
            "One A record per node_exporter pod.",
            headless_service("node-exporter", ns, pod_labels, NODE_EXPORTER_PORT, "metrics"),
        ),
        ("", service_monitor("node-exporter", ns, pod_labels, "metrics", honor_labels=False)),
    ]


def gateway_scrape_doc(stack: StackSpec, options: RenderOptions) -> Doc:
    """A headless Service over the gateway pods' metrics port: each replica scraped on its own
    (the gateway's own Service load-balances, so it would sample one replica at random)."""
    port_name, port = gateway_metrics_port(stack, options)
    service = headless_service(
        GATEWAY_SCRAPE_SERVICE,
        namespace_of(stack, options),
        labels(stack, "gateway"),
        port,
        port_name,
    )
    service["spec"]["ports"][0]["targetPort"] = port
    return (
        "The gateway replicas, one A record each, for prometheus.yml's gateway job.",
        service,
    )


def render_exporters(stack: StackSpec, options: RenderOptions) -> dict[str, str]:
    docs = [
        *dcgm_docs(stack, options),
        *node_exporter_docs(stack, options),
        gateway_scrape_doc(stack, options),
    ]
    return {"k8s/exporters.yaml": dump_documents(docs)}
