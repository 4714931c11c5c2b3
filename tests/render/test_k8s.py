from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from inhouse.errors import SpecError
from inhouse.launch.engine_args import vllm_serve_args
from inhouse.render import Rendered, render_stack
from inhouse.render.k8s_engine import TOPOLOGY_CHECK
from inhouse.render.k8s_tracing import with_tracing
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import StackSpec, parse_stack

HERE = Path(__file__).resolve().parent
TOPO = HERE.parent / "topology" / "data"
KUBERNETES_VERSION = RenderOptions().kubernetes_version
# Custom resources have no schema in kubernetes-validate: each is checked against a JSON schema
# shipped here, a subset of its CRD's OpenAPI schema (the fields inhouse renders, unknown fields
# rejected).
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject.json",
}


def documents(rendered: Rendered) -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, doc)
        for path, text in rendered.files.items()
        if path.startswith("k8s/")
        for doc in yaml.safe_load_all(text)
    ]


def find(rendered: Rendered, kind: str, name: str) -> dict[str, Any]:
    for _, doc in documents(rendered):
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name}")


def containers(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


@pytest.mark.parametrize("example", ["crm-copilot", "code-assistant"])
def test_every_manifest_validates_offline(rendered: dict[str, Rendered], example: str) -> None:
    kinds = set()
    for _, doc in documents(rendered[example]):
        key = (doc["apiVersion"], doc["kind"])
        kinds.add(doc["kind"])
        if key in CRD_SCHEMAS:
            schema = json.loads((HERE / "schemas" / CRD_SCHEMAS[key]).read_text())
            jsonschema.validate(doc, schema)
        else:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    expected = {"Namespace", "Deployment", "Service", "ConfigMap", "PodDisruptionBudget"}
    expected |= {"StatefulSet"} if example == "crm-copilot" else set()
    expected |= {"NetworkPolicy", "ServiceMonitor", "PrometheusRule"}
    assert expected <= kinds
    assert ("ScaledObject" in kinds) == (example == "code-assistant")


def test_strict_validation_catches_a_misspelled_field(crm: Rendered) -> None:
    deployment = find(crm, "StatefulSet", "chat")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def engine_workloads(rendered: Rendered, pool: str) -> list[dict[str, Any]]:
    return [
        doc
        for _, doc in documents(rendered)
        if doc["kind"] in ("Deployment", "StatefulSet")
        and doc["metadata"]["labels"].get("app.kubernetes.io/component") == "engine"
        and doc["metadata"]["labels"].get("inhouse.dev/pool") == pool
    ]


def test_one_apply_replaces_a_single_node_pool_one_replica_at_a_time(
    crm_stack: StackSpec, crm: Rendered
) -> None:
    """A changed pod template (a new vLLM image, an argument) applied with `kubectl apply`
    must not restart every replica of the pool together: the pool is one StatefulSet, whose
    RollingUpdate replaces one pod at a time and waits for it to be Ready before the next. One
    object per replica would each roll at once, and the pool would be down for the load."""
    pool = crm_stack.pool("chat")
    assert pool.replicas > 1
    (workload,) = engine_workloads(crm, "chat")
    kubernetes_validate.validate(workload, KUBERNETES_VERSION, strict=True)
    assert workload["kind"] == "StatefulSet"
    spec = workload["spec"]
    assert spec["replicas"] == pool.replicas
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    rolling = spec["updateStrategy"].get("rollingUpdate", {})
    assert rolling.get("partition", 0) == 0 and rolling.get("maxUnavailable", 1) == 1
    # per-pod DNS through the pool's headless Service
    service = find(crm, "Service", spec["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    # each replica keeps its own stable address: a Service that selects exactly its pod
    name = workload["metadata"]["name"]
    template_labels = spec["template"]["metadata"]["labels"]
    for index in range(pool.replicas):
        own = find(crm, "Service", f"{name}-{index}")["spec"]["selector"]
        assert own.pop("statefulset.kubernetes.io/pod-name") == f"{name}-{index}"
        assert own.items() <= template_labels.items()


def test_crm_is_two_tp4_replicas_on_the_nvlink_halves(crm_stack: StackSpec, crm: Rendered) -> None:
    (engine,) = engine_workloads(crm, "chat")
    assert engine["metadata"]["name"] == "chat"
    assert engine["spec"]["replicas"] == 2
    pod = engine["spec"]["template"]
    # replica i (pod chat-i) is planned on the i-th group
    assert pod["metadata"]["annotations"]["inhouse.dev/gpu-ids"] == "0,1,2,3;4,5,6,7"
    vllm = containers(engine)["vllm"]
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    # the stack's arguments, with tracing (on in the example) sent to the in-cluster Tempo
    traced = with_tracing(crm_stack, RenderOptions())
    expected = vllm_serve_args(traced, traced.pool("chat"), 0, 8000)[1:]
    assert "--otlp-traces-endpoint" in expected
    assert vllm["command"] == ["vllm", "serve"]
    assert vllm["args"] == ["/models/meta-llama/Llama-3.3-70B-Instruct", *expected]
    assert "check-gpu-topology" in containers(engine)


def test_engine_pod_lifecycle(crm: Rendered) -> None:
    deployment = find(crm, "StatefulSet", "chat")
    spec = deployment["spec"]["template"]["spec"]
    vllm = containers(deployment)["vllm"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert vllm[probe]["httpGet"] == {"path": "/health", "port": "http"}
    startup = vllm["startupProbe"]
    # 141 GB of bf16 checkpoint at 2 GB/s + 180 s init, doubled, and at least 10 minutes.
    assert startup["periodSeconds"] * startup["failureThreshold"] == 600
    prestop = int(vllm["lifecycle"]["preStop"]["exec"]["command"][1])
    drain = int(vllm["args"][vllm["args"].index("--shutdown-timeout") + 1])
    assert spec["terminationGracePeriodSeconds"] >= prestop + drain
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["models"]["hostPath"] == {"path": "/mnt/nvme/models", "type": "Directory"}
    mounts = {m["name"]: m for m in vllm["volumeMounts"]}
    assert mounts["models"]["readOnly"] is True
    assert mounts["shm"]["mountPath"] == "/dev/shm"


def test_init_containers_verify_model_and_adapter_signatures(crm: Rendered) -> None:
    init = containers(find(crm, "StatefulSet", "chat"))
    paths = [c["args"][2] for name, c in init.items() if name.startswith("verify-")]
    assert paths == [
        "/models/meta-llama/Llama-3.3-70B-Instruct",
        "/models/lora/utility-summarize",
        "/models/lora/utility-classify",
        "/models/lora/utility-extract",
    ]
    verify = init["verify-model"]
    assert verify["command"] == ["model_signing"]
    assert verify["args"][:2] == ["verify", "key"]
    assert "--public_key" in verify["args"]


def test_no_key_material_is_rendered(rendered: dict[str, Rendered]) -> None:
    for rendered_stack in rendered.values():
        kinds = {doc["kind"] for _, doc in documents(rendered_stack)}
        assert "Secret" not in kinds
        gateway = find(rendered_stack, "Deployment", "gateway")
        volumes = gateway["spec"]["template"]["spec"]["volumes"]
        assert {"name": "secrets", "secret": {"secretName": "gateway-tenant-keys"}} in volumes
        text = "".join(rendered_stack.files.values())
        assert "BEGIN" not in text and "PRIVATE KEY" not in text


def test_stack_with_an_api_key_in_the_gateway_section_is_refused() -> None:
    # Refused when the stack is loaded (the gateway section is checked there), with render's
    # own advice, not as an unknown field.
    data = {
        "name": "demo",
        "pools": [{"name": "chat", "model": "Llama-3.1-8B"}],
        "gateway": {"tenants": [{"name": "acme", "api_key": "sk-123"}]},
    }
    with pytest.raises(SpecError, match=r"gateway\.tenants\[0\]\.api_key: looks like key"):
        parse_stack(data)
    with pytest.raises(SpecError, match=r"gateway\.tenants\[0\]\.api_key"):
        render_stack(
            parse_stack({**data, "gateway": {}}).model_copy(update={"gateway": data["gateway"]})
        )


def test_only_the_gateway_and_prometheus_reach_engines(crm: Rendered) -> None:
    policy = find(crm, "NetworkPolicy", "engines-from-gateway-only")["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    sources = policy["ingress"][0]["from"]
    assert sources[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
    assert sources[1]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    assert policy["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 8000}]


def test_gateway_endpoints_name_each_static_replica(crm: Rendered) -> None:
    config = find(crm, "ConfigMap", "gateway-config")["data"]
    assert json.loads(config["endpoints.json"]) == {
        "pools": {
            "chat": [
                "http://chat-0.crm-copilot.svc:8000",
                "http://chat-1.crm-copilot.svc:8000",
            ]
        }
    }
    assert "name: crm-copilot" in config["stack.yaml"]


def test_a_scaled_pools_endpoints_say_how_to_find_its_replicas(
    rendered: dict[str, Rendered],
) -> None:
    """A pool KEDA scales is a headless Service: the gateway resolves it (`discovery`), in as
    many replica slots as the ScaledObject's maximum, and parses the file render wrote."""
    from inhouse.spec.endpoints import parse_endpoints

    code = rendered["code-assistant"]
    data = json.loads(find(code, "ConfigMap", "gateway-config")["data"]["endpoints.json"])
    assert sorted(data["discovery"]) == ["fallback", "long", "standard"]  # all scaled
    parsed = parse_endpoints(data, "endpoints.json")
    for pool, entry in data["discovery"].items():
        host = f"{pool}-engine.code-assistant.svc.cluster.local"
        high = find(code, "ScaledObject", pool)["spec"]["maxReplicaCount"]
        # absolute: not tried under the pod's search domains first (ndots:5)
        assert entry == {"dns": f"{host}.", "port": 8000, "max_replicas": high}
        assert data["pools"][pool] == [f"http://{host}:8000"]  # for gateways before discovery
        assert parsed.discovery[pool].max_replicas == high


def test_multi_node_pools_scale_with_keda_on_vllm_waiting(rendered: dict[str, Rendered]) -> None:
    code = rendered["code-assistant"]
    scaled = find(code, "ScaledObject", "long")["spec"]
    trigger = scaled["triggers"][0]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == (
        'sum(vllm:num_requests_waiting{namespace="code-assistant",model_name="code-70b-long"})'
    )
    assert trigger["metadata"]["threshold"] == "20"
    # 16 GPUs, all taken by the pools' minimums (3 x TP2 + 2 x TP4 + 2 x TP1): no headroom.
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (2, 2)
    assert find(code, "Deployment", "standard")["spec"]["replicas"] == 3


def test_keda_ceiling_is_what_the_free_gpus_hold() -> None:
    stack = parse_stack(
        {
            "name": "demo",
            "nodes": [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": 2}],
            "pools": [
                {"name": "big", "model": "Llama-3.3-70B", "quant": "fp8", "tp": 4, "replicas": 1},
                {"name": "small", "model": "Llama-3.1-8B", "tp": 1, "replicas": 2},
            ],
        }
    )
    rendered = render_stack(stack)
    # big: (16 - 2 for small) // 4 = 3; small: 16 - 4 for big = 12.
    assert find(rendered, "ScaledObject", "big")["spec"]["maxReplicaCount"] == 3
    assert find(rendered, "ScaledObject", "small")["spec"]["maxReplicaCount"] == 12


def test_registry_mirror_rewrites_every_image(crm_stack: StackSpec) -> None:
    rendered = render_stack(crm_stack, RenderOptions(registry="registry.local:5000"))
    images = {
        c["image"]
        for _, doc in documents(rendered)
        if doc["kind"] in ("Deployment", "DaemonSet", "StatefulSet")
        for c in containers(doc).values()
    }
    assert images == {
        "registry.local:5000/vllm/vllm-openai:v0.33.0",
        "registry.local:5000/sigstore/model-transparency-cli:v1.1.1",
        "registry.local:5000/inhouse:0.1.0",
        "registry.local:5000/envoyproxy/envoy:v1.40.0",
        "registry.local:5000/nvidia/k8s/dcgm-exporter:3.3.9-3.6.1-ubuntu22.04",
        "registry.local:5000/prometheus/node-exporter:v1.8.2",
        "registry.local:5000/grafana/loki:3.4.2",
        "registry.local:5000/grafana/alloy:v1.5.1",
        "registry.local:5000/grafana/tempo:2.6.1",
    }


@pytest.mark.parametrize(
    ("topo", "ok", "first_bad"),
    [
        ("h100-sxm-8gpu.topo", True, ""),
        ("h100-pcie-bridged-8gpu.topo", False, "GPU0-GPU2 joined by NODE, not NVLink"),
        ("l40s-pcie-8gpu.topo", False, "GPU0-GPU1 joined by PIX, not NVLink"),
    ],
)
def test_in_pod_topology_check(topo: str, ok: bool, first_bad: str) -> None:
    """The init container's script, with `nvidia-smi topo -m` replaced by a sample output."""
    if shutil.which("awk") is None or shutil.which("sed") is None:
        pytest.skip("awk/sed not installed")
    script = TOPOLOGY_CHECK.replace("nvidia-smi topo -m", f"cat {TOPO / topo}")
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert (done.returncode == 0) == ok
    assert done.stdout.splitlines()[:1] == ([first_bad] if first_bad else [])


def relabel(rules: list[dict[str, Any]], meta: dict[str, str]) -> dict[str, str]:
    """Prometheus's `replace` relabelling (the default action): the source labels joined by the
    separator, matched by the fully anchored regex, set the target label to the replacement."""
    out = dict(meta)
    for rule in rules:
        assert rule.get("action", "replace") == "replace"
        value = rule.get("separator", ";").join(out.get(k, "") for k in rule["sourceLabels"])
        found = re.fullmatch(rule.get("regex", "(.*)"), value)
        if found:
            out[rule["targetLabel"]] = found.expand(
                rule.get("replacement", "$1").replace("$", "\\")
            )
    return out


def test_the_scrape_labels_each_static_replica_as_the_gateway_does(crm: Rendered) -> None:
    """The gateway labels replica i `replica="i"`; the ServiceMonitor gives the engine's series
    the same, from the StatefulSet pod's name (its template has no per-replica label), and no
    replica label to a scaled pool's pods."""
    monitor = find(crm, "ServiceMonitor", "engines")
    (endpoint,) = monitor["spec"]["endpoints"]
    rules = endpoint["relabelings"]
    pool_label = "__meta_kubernetes_pod_label_inhouse_dev_pool"
    for index in range(2):
        meta = {
            "__meta_kubernetes_pod_controller_kind": "StatefulSet",
            "__meta_kubernetes_pod_name": f"chat-{index}",
            pool_label: "chat",
        }
        assert relabel(rules, meta)["replica"] == str(index)
        assert relabel(rules, meta)["pool"] == "chat"
    scaled = {
        "__meta_kubernetes_pod_controller_kind": "ReplicaSet",
        "__meta_kubernetes_pod_name": "long-6d4cf56db6-24567",  # digits only, by chance
        pool_label: "long",
    }
    assert "replica" not in relabel(rules, scaled)


def test_gateway_replicas_deploy_that_many_gateways_sharing_limits_through_redis(
    crm_stack: StackSpec,
) -> None:
    """The rendered gateway told operators to "set gateway.replicas and redis_url for HA", and
    the stack refused `gateway.replicas` as an unknown field."""
    ha = {**crm_stack.gateway, "replicas": 3, "redis_url": "redis://limits:6379/0"}
    rendered = render_stack(parse_stack({**crm_stack.model_dump(), "gateway": ha}))
    assert find(rendered, "Deployment", "gateway")["spec"]["replicas"] == 3
    assert "share rate limits and budgets through Redis" in rendered.files["k8s/gateway.yaml"]
    assert find(render_stack(crm_stack), "Deployment", "gateway")["spec"]["replicas"] == 1


def test_gateway_replicas_without_redis_are_refused_by_field(crm_stack: StackSpec) -> None:
    """Each gateway would count a tenant's limits in its own memory: three of them admit a
    tenant three times its budget."""
    alone = {**crm_stack.gateway, "replicas": 3}
    alone.pop("redis_url", None)
    for gateway in (alone, {**alone, "redis_url": ""}):  # "" keeps limits in memory too
        with pytest.raises(SpecError, match=r"gateway: 1 problem\(s\)\n  replicas: .*redis_url"):
            parse_stack({**crm_stack.model_dump(), "gateway": gateway})
