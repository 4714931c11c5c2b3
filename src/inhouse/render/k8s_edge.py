"""The edge in the cluster (`k8s/edge.yaml`): Envoy in front of the gateway, and the gateway's
NetworkPolicy. Plain Envoy, not Envoy Gateway's resources: why is in `inhouse.render.edge`.

Clients reach Envoy's Service (TLS on 443, the certificate from Secret `edge_tls_secret`, which
the operator creates: `kubectl create secret tls`); Envoy reaches the gateway's Service. The
gateway's API port admits only Envoy, its metrics port only Prometheus's namespace, so the
gateway may trust Envoy's `X-Forwarded-For` (`gateway.server.trusted_proxies`, set in the
stack the ConfigMap carries unless the stack sets it).
"""

from __future__ import annotations

from typing import Any

from inhouse.render import layout
from inhouse.render.edge import Edge, render_envoy_yaml
from inhouse.render.k8s_engine import Doc, disruption_budget, labels, locked_down, namespace_of
from inhouse.render.options import RenderOptions
from inhouse.spec.gateway import GatewaySpec, parse_gateway
from inhouse.spec.stack import StackSpec

EDGE_PORT = 8443
TLS_DIR = "/etc/envoy/tls"
EVERYWHERE = ("0.0.0.0/0", "::/0")


def gateway_section_for_cluster(stack: StackSpec) -> dict[str, Any]:
    """The stack's `gateway` section as the cluster's gateway reads it: Envoy's address is
    trusted for X-Forwarded-For (the NetworkPolicy lets only Envoy reach the API port)."""
    section = dict(stack.gateway)
    server = dict(section.get("server") or {})
    server.setdefault("trusted_proxies", list(EVERYWHERE))
    section["server"] = server
    return section


def envoy_yaml_for_cluster(stack: StackSpec, options: RenderOptions, spec: GatewaySpec) -> str:
    ns = namespace_of(stack, options)
    edge = Edge(
        "0.0.0.0",
        EDGE_PORT,
        f"gateway.{ns}.svc.cluster.local",
        80,
        upstream_dns=True,
        certfile=f"{TLS_DIR}/tls.crt",
        keyfile=f"{TLS_DIR}/tls.key",
    )
    return render_envoy_yaml(edge, spec)


def edge_docs(stack: StackSpec, options: RenderOptions) -> list[Doc]:
    ns = namespace_of(stack, options)
    spec = parse_gateway(stack.gateway)
    pod_labels = labels(stack, "edge")
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "edge-config", "namespace": ns, "labels": pod_labels},
        "data": {"envoy.yaml": envoy_yaml_for_cluster(stack, options, spec)},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "edge", "namespace": ns, "labels": pod_labels},
        "spec": {
            "type": options.edge_service_type,
            "selector": pod_labels,
            "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
        },
    }
    return [
        (
            "The edge: Envoy's configuration (the same file `inhouse up --edge envoy` runs; "
            "check it with `envoy --mode validate`).",
            config,
        ),
        (
            f"Envoy terminates TLS (Secret {options.edge_tls_secret}, not rendered: kubectl -n "
            f"{ns} create secret tls {options.edge_tls_secret} --cert=tls.crt --key=tls.key) "
            "and enforces header and idle timeouts and connection limits before the gateway.",
            _edge_deployment(stack, options, ns, pod_labels),
        ),
        ("Clients reach the stack here (443).", service),
        (
            "Voluntary disruptions take one Envoy replica at a time.",
            disruption_budget("edge", ns, pod_labels),
        ),
        gateway_network_policy(stack, options, spec),
    ]


def _edge_deployment(
    stack: StackSpec, options: RenderOptions, ns: str, pod_labels: dict[str, str]
) -> dict[str, Any]:
    # NOTE: Envoy exits at SIGTERM without draining (it drains only when asked on its admin
    # port), cutting every stream it carries: the preStop sleep outlasts the drain from the
    # Service and then what the gateway behind it still streams.
    prestop_s = options.prestop_sleep_s + layout.gateway_inflight_s(stack)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "edge", "namespace": ns, "labels": pod_labels},
        "spec": {
            "replicas": options.edge_replicas,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "terminationGracePeriodSeconds": prestop_s + layout.TEARDOWN_MARGIN_S,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [_envoy_container(options, prestop_s)],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "edge-config"}},
                        {"name": "tls", "secret": {"secretName": options.edge_tls_secret}},
                    ],
                },
            },
        },
    }


def _envoy_container(options: RenderOptions, prestop_s: int) -> dict[str, Any]:
    return {
        "name": "envoy",
        "image": options.image(options.envoy_image),
        "imagePullPolicy": "IfNotPresent",
        "args": ["-c", "/etc/envoy/envoy.yaml", "--log-level", "warning"],
        "ports": [{"name": "https", "containerPort": EDGE_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "1", "memory": "512Mi"},
            "limits": {"cpu": "2", "memory": "1Gi"},
        },
        "volumeMounts": [
            {
                "name": "config",
                "mountPath": "/etc/envoy/envoy.yaml",
                "subPath": "envoy.yaml",
                "readOnly": True,
            },
            {"name": "tls", "mountPath": TLS_DIR, "readOnly": True},
        ],
        "readinessProbe": {"tcpSocket": {"port": "https"}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "https"}, "periodSeconds": 15},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(prestop_s)]}}},
        "securityContext": locked_down(101),
    }


def gateway_network_policy(stack: StackSpec, options: RenderOptions, spec: GatewaySpec) -> Doc:
    monitoring = {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": options.monitoring_namespace}
        }
    }
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "gateway-from-edge-only", "namespace": namespace_of(stack, options)},
        "spec": {
            "podSelector": {"matchLabels": labels(stack, "gateway")},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": labels(stack, "edge")}}],
                    "ports": [{"protocol": "TCP", "port": options.gateway_port}],
                },
                {
                    "from": [monitoring],
                    "ports": [{"protocol": "TCP", "port": spec.metrics_port}],
                },
            ],
        },
    }
    why = (
        "Only Envoy reaches the gateway's API port (so its X-Forwarded-For can be trusted); "
        f"only Prometheus (namespace {options.monitoring_namespace}) reaches /metrics on port "
        f"{spec.metrics_port}, which names tenants and their token counts. The kubelet's "
        "probes are not subject to NetworkPolicy."
    )
    return why, policy
