"""Loki, Alloy, Tempo and Grafana provisioning as rendered.

None of Grafana Loki, Alloy or Tempo installs here: Debian's `loki` package is an unrelated
program (MCMC linkage analysis on pedigrees), and Alloy and Tempo are in no registry this
project reaches. So their configurations are checked structurally: the fields each binary
documents for the settings that matter (retention, receivers, no usage reports), and, for
Alloy's pipeline, that every component it references is declared. The Kubernetes objects that
run them validate strictly with the rest (test_k8s.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from inhouse.render import Rendered, render_stack
from inhouse.render.k8s_logging import PROMPT_LINE, alloy_config
from inhouse.render.k8s_tracing import tracing_env
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import StackSpec, parse_stack

COMPONENTS = {
    "discovery.kubernetes",
    "discovery.relabel",
    "loki.source.kubernetes",
    "loki.process",
    "loki.write",
}


def config_of(rendered: Rendered, path: str, configmap: str, key: str) -> str:
    for doc in yaml.safe_load_all(rendered.files[path]):
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == configmap:
            return doc["data"][key]  # type: ignore[no-any-return]
    raise AssertionError(f"no ConfigMap {configmap} in {path}")


def test_loki_keeps_ninety_days_and_reports_nothing(crm: Rendered) -> None:
    loki = yaml.safe_load(config_of(crm, "k8s/logging.yaml", "loki-config", "loki.yaml"))
    assert loki["limits_config"]["retention_period"] == "2160h"  # 90 days, the seeds'
    assert loki["compactor"]["retention_enabled"] is True
    assert loki["analytics"] == {"reporting_enabled": False}
    (schema,) = loki["schema_config"]["configs"]
    assert (schema["store"], schema["schema"], schema["object_store"]) == (
        "tsdb",
        "v13",
        "filesystem",
    )
    assert loki["auth_enabled"] is False


def declared_and_referenced(config: str) -> tuple[set[str], set[str]]:
    declared = {
        f"{kind}.{label}" for kind, label in re.findall(r'^([a-z.]+) "(\w+)" \{', config, re.M)
    }
    referenced = set()
    for kind in COMPONENTS:
        for label in re.findall(rf"= \[?{re.escape(kind)}\.(\w+)\.\w+", config):
            referenced.add(f"{kind}.{label}")
    return declared, referenced


def test_alloy_pipeline_references_resolve_and_braces_balance(crm: Rendered) -> None:
    config = config_of(crm, "k8s/logging.yaml", "alloy-config", "config.alloy")
    assert config.count("{") == config.count("}")
    declared, referenced = declared_and_referenced(config)
    assert {d.rsplit(".", 1)[0] for d in declared} == COMPONENTS
    assert referenced and referenced <= declared
    assert 'label = "app.kubernetes.io/part-of=crm-copilot"' in config
    assert "http://loki.monitoring.svc:3100/loki/api/v1/push" in config
    deployment = next(
        d for d in yaml.safe_load_all(crm.files["k8s/logging.yaml"]) if d["kind"] == "Deployment"
    )
    assert "--disable-reporting" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_alloy_drops_prompt_lines_unless_prompt_logging_is_on(crm_stack: StackSpec) -> None:
    off = alloy_config(crm_stack, "crm-copilot", RenderOptions())
    assert f"expression          = `{PROMPT_LINE}`" in off
    stack = crm_stack.model_copy(update={"gateway": {"log": {"prompts": True}}})
    assert "stage.drop" not in alloy_config(stack, "crm-copilot", RenderOptions())


def test_prompt_pattern_matches_prompt_lines_only() -> None:
    pattern = re.compile(PROMPT_LINE)
    prompts = [
        '{"msg": "request", "tenant": "demo", "prompt": "my account 4411"}',
        '{"messages": [{"role": "user"}]}',
        "request cmpl-1 prompt: 'my account 4411'",
        'Received request chatcmpl-9: prompt: "hello", params: SamplingParams(n=1)',
        "Received request x: prompt_token_ids: [1, 2, 3]",
    ]
    clean = [
        '{"msg": "request", "tenant": "demo", "prompt_tokens": 42, "completion_tokens": 8}',
        "Added request cmpl-1: prompt_tokens=12 max_tokens=24 priority=0",
        '{"msg": "replica chat-0 healthy", "level": "info"}',
    ]
    assert all(pattern.search(line) for line in prompts)
    assert not any(pattern.search(line) for line in clean)


def test_tempo_receives_otlp_and_keeps_the_retention(crm: Rendered) -> None:
    tempo = yaml.safe_load(config_of(crm, "k8s/tracing.yaml", "tempo-config", "tempo.yaml"))
    protocols = tempo["distributor"]["receivers"]["otlp"]["protocols"]
    assert protocols == {"grpc": {"endpoint": "0.0.0.0:4317"}, "http": {"endpoint": "0.0.0.0:4318"}}
    assert tempo["compactor"]["compaction"]["block_retention"] == "336h"
    assert tempo["usage_report"] == {"reporting_enabled": False}
    service = next(
        d for d in yaml.safe_load_all(crm.files["k8s/tracing.yaml"]) if d["kind"] == "Service"
    )
    assert {p["port"] for p in service["spec"]["ports"]} == {3200, 4317, 4318}


def test_tracing_samples_at_the_source_and_the_gateway_sends_to_tempo(
    crm_stack: StackSpec, crm: Rendered
) -> None:
    assert tracing_env(crm_stack) == [
        {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.05"},
    ]
    gateway = next(
        d for d in yaml.safe_load_all(crm.files["k8s/gateway.yaml"]) if d["kind"] == "Deployment"
    )
    env = gateway["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.05"} in env
    config = config_of(crm, "k8s/gateway.yaml", "gateway-config", "stack.yaml")
    assert yaml.safe_load(config)["gateway"]["otlp_endpoint"] == (
        "http://tempo.monitoring.svc:4318/v1/traces"
    )
    tracing = crm_stack.observability.tracing.model_copy(update={"enabled": False})
    observability = crm_stack.observability.model_copy(update={"tracing": tracing})
    off = render_stack(crm_stack.model_copy(update={"observability": observability}))
    off_config = yaml.safe_load(config_of(off, "k8s/gateway.yaml", "gateway-config", "stack.yaml"))
    assert "otlp_endpoint" not in off_config.get("gateway", {})
    assert "OTEL_TRACES_SAMPLER" not in off.files["k8s/gateway.yaml"]


def test_grafana_provisioning_carries_every_dashboard_and_linked_sources(crm: Rendered) -> None:
    sources = yaml.safe_load(crm.files["grafana/provisioning/datasources/inhouse.yaml"])
    by_uid: dict[str, Any] = {s["uid"]: s for s in sources["datasources"]}
    assert set(by_uid) == {"prometheus", "loki", "tempo"}
    assert by_uid["tempo"]["jsonData"]["tracesToLogsV2"]["datasourceUid"] == "loki"
    boards = [
        d
        for d in yaml.safe_load_all(crm.files["k8s/grafana.yaml"])
        if "-dashboard-" in d["metadata"]["name"]
    ]
    assert all(b["metadata"]["labels"]["grafana_dashboard"] == "1" for b in boards)
    rendered = {p.removeprefix("grafana/"): t for p, t in crm.files.items() if p.endswith(".json")}
    carried = {name: text for b in boards for name, text in b["data"].items()}
    assert carried == rendered and len(boards) == len(rendered)  # one ConfigMap each
    for text in carried.values():
        json.loads(text)
    # kubectl apply keeps the object in an annotation limited to 256 KiB.
    assert len(crm.files["k8s/grafana.yaml"].encode()) < 256 * 1024


def test_every_object_of_a_many_pool_stack_fits_kubectl_apply() -> None:
    """Client-side `kubectl apply` keeps each object, as JSON, in its
    last-applied-configuration annotation, and annotations hold at most 262,144 bytes: one
    ConfigMap with all eight dashboards, whose panels grow with the pools, passed that at 10
    pools and `kubectl apply -f k8s/` failed."""
    pools = [{"name": f"p{i}", "model": "llama-3.1-8b", "served_model_name": f"m{i}"}
             for i in range(10)]  # fmt: skip
    nodes = [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": 2}]
    rendered = render_stack(parse_stack({"name": "big", "nodes": nodes, "pools": pools}))
    for path, text in rendered.files.items():
        if path.startswith("k8s/"):
            for doc in yaml.safe_load_all(text):
                if doc:
                    size = len(json.dumps(doc, separators=(",", ":")).encode())
                    assert size < 262_144, (path, doc["metadata"]["name"], size)
