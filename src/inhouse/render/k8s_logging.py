"""Logs: Loki (single binary, filesystem storage, the stack's retention) and Grafana Alloy
shipping the gateway's and engines' container logs to it: `k8s/logging.yaml`.

Prompts stay out of Loki unless the operator turned prompt logging on (`gateway.log.prompts`):
the gateway and the simulated engine never write them by default, and Alloy's pipeline drops
any line that carries one anyway (a JSON `"prompt"`/`"messages"` field, a `prompt: '...'` or
`prompt_token_ids: [...]` request log as vLLM's and the simulated engine's loggers write
them) as a second lock. Neither Loki nor Alloy reports
usage to Grafana Labs (both switches off: nothing leaves the building).
"""

from __future__ import annotations

from typing import Any

from inhouse.render.k8s_engine import Doc, labels
from inhouse.render.options import RenderOptions
from inhouse.render.yamltext import dump_documents, dump_yaml
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import StackSpec

LOKI_PORT = 3100
ALLOY_PORT = 12345
# RE2 (Alloy's regexp engine) and Python's re read this alike; tests apply it to real lines.
PROMPT_LINE = r'"(prompt|messages)"\s*:|\bprompt: [' + "'" + r'"]|prompt_token_ids: \['
# (source label, target label) of each relabel rule after the component filter.
_ALLOY_LABELS = (
    ("__meta_kubernetes_namespace", "namespace"),
    ("__meta_kubernetes_pod_name", "pod"),
    ("__meta_kubernetes_pod_container_name", "container"),
    ("__meta_kubernetes_pod_label_app_kubernetes_io_component", "component"),
    ("__meta_kubernetes_pod_label_inhouse_dev_pool", "pool"),
)


def loki_url(options: RenderOptions) -> str:
    return f"http://loki.{options.monitoring_namespace}.svc:{LOKI_PORT}"


def loki_config(stack: StackSpec) -> dict[str, Any]:
    """Loki 3 single binary: TSDB index and chunks on the local volume, retention enforced by
    the compactor, no usage reporting."""
    days = stack.observability.log_retention_days
    return {
        "auth_enabled": False,
        "server": {"http_listen_port": LOKI_PORT, "grpc_listen_port": 9095},
        "common": {
            "path_prefix": "/var/loki",
            "replication_factor": 1,
            "ring": {"kvstore": {"store": "inmemory"}},
            "storage": {
                "filesystem": {
                    "chunks_directory": "/var/loki/chunks",
                    "rules_directory": "/var/loki/rules",
                }
            },
        },
        "schema_config": {
            "configs": [
                {
                    "from": "2024-01-01",
                    "store": "tsdb",
                    "object_store": "filesystem",
                    "schema": "v13",
                    "index": {"prefix": "index_", "period": "24h"},
                }
            ]
        },
        "limits_config": {"retention_period": f"{days * 24}h", "allow_structured_metadata": True},
        "compactor": {
            "working_directory": "/var/loki/compactor",
            "retention_enabled": True,
            "delete_request_store": "filesystem",
        },
        "analytics": {"reporting_enabled": False},
    }


def alloy_config(stack: StackSpec, namespace: str, options: RenderOptions) -> str:
    """Alloy's pipeline: the stack's gateway and engine pods, their container logs, JSON
    `level` as a label, prompts dropped unless logging them is on, pushed to Loki."""
    return f"""// Rendered by `inhouse render`: {stack.name}'s gateway and engine logs to Loki.
{_alloy_discovery(stack, namespace)}
loki.source.kubernetes "inhouse" {{
  targets    = discovery.relabel.inhouse.output
  forward_to = [loki.process.inhouse.receiver]
}}

{_alloy_process(parse_gateway(stack.gateway).log.prompts)}
loki.write "default" {{
  endpoint {{
    url = "{loki_url(options)}/loki/api/v1/push"
  }}
}}
"""


def _alloy_discovery(stack: StackSpec, namespace: str) -> str:
    """The stack's pods in `namespace`, kept when they are its gateway or an engine, labelled
    with their namespace, pod, container, component and pool."""
    part_of = f"app.kubernetes.io/part-of={stack.name}"
    rules = "".join(
        f'  rule {{\n    source_labels = ["{source}"]\n    target_label  = "{target}"\n  }}\n'
        for source, target in _ALLOY_LABELS
    )
    return f"""discovery.kubernetes "pods" {{
  role = "pod"
  namespaces {{
    names = ["{namespace}"]
  }}
  selectors {{
    role  = "pod"
    label = "{part_of}"
  }}
}}

discovery.relabel "inhouse" {{
  targets = discovery.kubernetes.pods.targets
  rule {{
    source_labels = ["__meta_kubernetes_pod_label_app_kubernetes_io_component"]
    regex         = "gateway|engine"
    action        = "keep"
  }}
{rules}}}
"""


def _alloy_process(prompts_on: bool) -> str:
    """Prompt lines dropped (unless `gateway.log.prompts` is on), JSON `level` as a label."""
    drop = (
        "  // gateway.log.prompts is on: prompt lines are shipped (the operator asked).\n"
        if prompts_on
        else "  // Prompts never reach Loki unless gateway.log.prompts is on.\n"
        f"  stage.drop {{\n    expression          = `{PROMPT_LINE}`\n"
        '    drop_counter_reason = "prompt"\n  }\n'
    )
    return f"""loki.process "inhouse" {{
{drop}  stage.json {{
    expressions = {{ level = "level" }}
  }}
  stage.labels {{
    values = {{ level = "" }}
  }}
  forward_to = [loki.write.default.receiver]
}}
"""


def loki_docs(stack: StackSpec, options: RenderOptions) -> list[Doc]:
    ns = options.monitoring_namespace
    app = {"app.kubernetes.io/name": "loki", **labels(stack, "monitoring")}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "loki-config", "namespace": ns, "labels": app},
        "data": {"loki.yaml": dump_yaml(loki_config(stack))},
    }
    container = {
        "name": "loki",
        "image": options.image(options.loki_image),
        "args": ["-config.file=/etc/loki/loki.yaml"],
        "ports": [{"name": "http", "containerPort": LOKI_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/loki", "readOnly": True},
            {"name": "data", "mountPath": "/var/loki"},
        ],
    }
    days = stack.observability.log_retention_days
    statefulset = store_statefulset("loki", ns, app, container, "200Gi")
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "loki", "namespace": ns, "labels": app},
        "spec": {
            "selector": app,
            "ports": [{"name": "http", "port": LOKI_PORT, "targetPort": "http"}],
        },
    }
    return [
        (
            f"Loki: {days} days of logs (the compactor deletes older chunks); no usage reports.",
            config,
        ),
        ("Loki as one binary on a local volume: the gateway's and engines' logs.", statefulset),
        ("Alloy pushes here; Grafana reads here.", service),
    ]


def alloy_docs(stack: StackSpec, namespace: str, options: RenderOptions) -> list[Doc]:
    ns = options.monitoring_namespace
    app = {"app.kubernetes.io/name": "alloy", **labels(stack, "monitoring")}
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "alloy-config", "namespace": ns, "labels": app},
        "data": {"config.alloy": alloy_config(stack, namespace, options)},
    }
    account, role, binding = _alloy_rbac(namespace, ns, app)
    return [
        ("Alloy's pipeline (Promtail is deprecated): see the comments inside.", config),
        (
            "Alloy reads pod logs through the API: it may list and read the stack's pods only.",
            account,
        ),
        ("", role),
        ("", binding),
        (
            "One Alloy tails the stack's gateway and engine containers (loki.source.kubernetes).",
            _alloy_deployment(ns, app, options),
        ),
    ]


def _alloy_rbac(namespace: str, ns: str, app: dict[str, str]) -> list[dict[str, Any]]:
    """Alloy's ServiceAccount (in `ns`) and the Role and RoleBinding that let it list and read
    the logs of the pods in the stack's `namespace`."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "alloy", "namespace": ns, "labels": app},
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "alloy-read-logs", "namespace": namespace, "labels": app},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "alloy-read-logs", "namespace": namespace, "labels": app},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "alloy-read-logs",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "alloy", "namespace": ns}],
    }
    return [account, role, binding]


def _alloy_deployment(ns: str, app: dict[str, str], options: RenderOptions) -> dict[str, Any]:
    container = {
        "name": "alloy",
        "image": options.image(options.alloy_image),
        "args": [
            "run",
            "/etc/alloy/config.alloy",
            "--storage.path=/var/lib/alloy",
            f"--server.http.listen-addr=0.0.0.0:{ALLOY_PORT}",
            "--disable-reporting",
        ],
        "ports": [{"name": "http", "containerPort": ALLOY_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "http"}, "periodSeconds": 10},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/alloy", "readOnly": True},
            {"name": "storage", "mountPath": "/var/lib/alloy"},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "alloy", "namespace": ns, "labels": app},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": app},
            "template": {
                "metadata": {"labels": app},
                "spec": {
                    "serviceAccountName": "alloy",
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 473},
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "alloy-config"}},
                        {"name": "storage", "emptyDir": {}},
                    ],
                },
            },
        },
    }


def render_logging(stack: StackSpec, namespace: str, options: RenderOptions) -> dict[str, str]:
    docs = [*loki_docs(stack, options), *alloy_docs(stack, namespace, options)]
    return {"k8s/logging.yaml": dump_documents(docs)}


def store_statefulset(
    name: str, ns: str, app: dict[str, str], container: dict[str, Any], storage: str
) -> dict[str, Any]:
    """A single-binary store (Loki, Tempo): one replica, its `<name>-config` ConfigMap, a
    `data` volume claim of `storage`, non-root with no service-account token."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns, "labels": app},
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": app},
            "template": {
                "metadata": {"labels": app},
                "spec": {
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": f"{name}-config"}}],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": storage}},
                    },
                }
            ],
        },
    }
