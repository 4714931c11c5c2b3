"""What `inhouse render` takes besides the stack: images, paths and cluster addresses."""

from __future__ import annotations

import re
from dataclasses import dataclass

import inhouse
from inhouse.errors import SpecError

# A Kubernetes namespace is a DNS-1123 label: kubectl refuses anything else, and the rendered
# PromQL carries it as a label value (`namespace="..."`), where a quote would rewrite the query.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """Cluster facts the stack file does not hold. Defaults suit a kube-prometheus-stack cluster
    with the NVIDIA GPU Operator, KEDA and images mirrored into a local registry.

    `registry`, when set, replaces the registry host of every image (air-gapped mirror).
    Pools whose weights come from the weight registry pull them in an init container running
    the inhouse image (`gateway_image`) with the S3 credentials of Secret `weights_secret`.
    `namespace` defaults to the stack's name. `runbook_url` prefixes each alert's runbook link.
    """

    namespace: str | None = None
    registry: str | None = None
    vllm_image: str = "vllm/vllm-openai:v0.33.0"
    gateway_image: str = f"inhouse:{inhouse.__version__}"
    signing_image: str = "ghcr.io/sigstore/model-transparency-cli:v1.1.1"
    # The observability stack's images (k8s/exporters.yaml, logging.yaml, tracing.yaml).
    dcgm_exporter_image: str = "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04"
    node_exporter_image: str = "quay.io/prometheus/node-exporter:v1.8.2"
    loki_image: str = "docker.io/grafana/loki:3.4.2"
    alloy_image: str = "docker.io/grafana/alloy:v1.5.1"
    tempo_image: str = "docker.io/grafana/tempo:2.6.1"
    models_host_path: str = "/mnt/nvme/models"
    signing_public_key_configmap: str = "model-signing-public-key"
    weights_secret: str = "weights-registry"  # AWS_ACCESS_KEY_ID, _SECRET_ACCESS_KEY, _ENDPOINT_URL
    gateway_secret: str = "gateway-tenant-keys"
    envoy_image: str = "docker.io/envoyproxy/envoy:v1.40.0"  # the release the tests run
    edge_tls_secret: str = "edge-tls"
    edge_service_type: str = "LoadBalancer"
    edge_replicas: int = 2
    monitoring_namespace: str = "monitoring"
    dcgm_namespace: str = "gpu-operator"
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    runbook_url: str = "runbook.md"
    # Alertmanager receivers (webhooks): the site's pager bridge and ticket system.
    page_webhook_url: str = "http://alert-bridge.monitoring.svc:9095/page"
    ticket_webhook_url: str = "http://alert-bridge.monitoring.svc:9095/ticket"
    alertmanager_address: str = "alertmanager-operated.monitoring.svc:9093"
    engine_port: int = 8000
    gateway_port: int = 8080
    prestop_sleep_s: int = 15
    # How long the cluster's DNS serves a Service's records from cache: the `ttl` of CoreDNS's
    # kubernetes plugin (30 in kubeadm's Corefile; the plugin's own default is 5). A scaled
    # pool's engines sleep it out before draining (`layout.engine_prestop_s`).
    dns_ttl_s: int = 30
    kubernetes_version: str = "1.30"  # what the manifests target; tests validate against it

    def __post_init__(self) -> None:
        if not 0 <= self.dns_ttl_s <= 3600:
            raise SpecError(
                f"--dns-ttl-s {self.dns_ttl_s}: the DNS TTL is 0..3600 s (CoreDNS's range); "
                "read it from the `ttl` line of the kubernetes block in the coredns ConfigMap"
            )
        for field in ("namespace", "monitoring_namespace", "dcgm_namespace"):
            value = getattr(self, field)
            if value is not None and not _DNS_LABEL.match(value):
                flag = "--" + field.replace("_", "-")
                raise SpecError(
                    f"{flag} {value!r} is not a Kubernetes namespace: at most 63 lowercase "
                    "letters, digits and '-', starting and ending with a letter or digit"
                )

    def image(self, ref: str) -> str:
        """`ref` with its registry host replaced by `registry` (first path part with a dot or
        colon, or `localhost`, is a host)."""
        if not self.registry:
            return ref
        first, _, rest = ref.partition("/")
        has_host = bool(rest) and ("." in first or ":" in first or first == "localhost")
        path = rest if has_host else ref
        return f"{self.registry.rstrip('/')}/{path}"
