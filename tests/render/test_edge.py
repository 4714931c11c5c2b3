"""The edge as rendered: `envoy.yaml` (one box) and `k8s/edge.yaml` (Envoy's ConfigMap,
Deployment, Service, the gateway's NetworkPolicy), checked by the real Envoy binary; the
gateway's metrics on their own port, scraped there, reachable only from Prometheus."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from inhouse.errors import SpecError
from inhouse.launch.edge import envoy_binary
from inhouse.render import Rendered
from inhouse.render.edge import Edge, envoy_config, render_envoy_yaml
from inhouse.spec.gateway import parse_gateway


def _envoy() -> str | None:
    try:
        binary = envoy_binary()
    except SpecError:
        return None
    ok = subprocess.run([binary, "--version"], capture_output=True, timeout=30).returncode == 0
    return binary if ok else None


ENVOY = _envoy()
needs_envoy = pytest.mark.skipif(ENVOY is None, reason="the Envoy binary cannot run here")


def docs_of(rendered: Rendered, path: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(rendered.files[path]))


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def validate(config: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    assert ENVOY is not None
    path = tmp_path / "envoy.yaml"
    path.write_text(config)
    return subprocess.run([ENVOY, "--mode", "validate", "-c", str(path)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=edge"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@needs_envoy
def test_the_one_box_envoy_yaml_is_valid_for_envoy(tmp_path: Path) -> None:
    spec = parse_gateway({"server": {"header_timeout_s": 5, "max_connections": 1000}})
    text = render_envoy_yaml(Edge("0.0.0.0", 8000, "127.0.0.1", 8001), spec)
    result = validate(text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = text.replace("request_headers_timeout", "request_header_timeout")
    assert validate(broken, tmp_path).returncode != 0  # the check can fail


@needs_envoy
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a test cert")
def test_the_clusters_envoy_yaml_is_valid_for_envoy(crm: Rendered, tmp_path: Path) -> None:
    config = find(docs_of(crm, "k8s/edge.yaml"), "ConfigMap", "edge-config")
    text = config["data"]["envoy.yaml"]
    cert, key = self_signed(tmp_path)
    text = text.replace("/etc/envoy/tls/tls.crt", str(cert)).replace(
        "/etc/envoy/tls/tls.key", str(key)
    )
    result = validate(text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_envoy_holds_the_gateways_limits_and_passes_streams_through() -> None:
    spec = parse_gateway({"server": {"header_timeout_s": 7, "max_connections": 123,
                                     "keep_alive_s": 40}})  # fmt: skip
    config = envoy_config(Edge("0.0.0.0", 8000, "gw", 80, upstream_dns=True), spec)
    listener = config["static_resources"]["listeners"][0]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["request_headers_timeout"] == "7s"
    assert manager["common_http_protocol_options"]["idle_timeout"] == "40s"
    assert manager["stream_idle_timeout"] == "600s"  # a long prefill is not cut
    assert manager["use_remote_address"] and manager["generate_request_id"]
    assert manager["preserve_external_request_id"]
    route = manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    assert route["timeout"] == "0s" and "idle_timeout" not in route
    assert [f["name"] for f in manager["http_filters"]] == ["envoy.filters.http.router"]
    monitor = config["overload_manager"]["resource_monitors"][0]["typed_config"]
    assert monitor["max_active_downstream_connections"] == 123
    assert config["static_resources"]["clusters"][0]["type"] == "STRICT_DNS"


def test_the_gateway_serves_metrics_on_their_port_and_only_envoy_reaches_its_api(
    crm: Rendered,
) -> None:
    gateway = docs_of(crm, "k8s/gateway.yaml")
    port = parse_gateway({}).metrics_port
    deployment = find(gateway, "Deployment", "gateway")
    ports = {p["name"]: p["containerPort"] for p in
             deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}  # fmt: skip
    assert ports["metrics"] == port
    service = find(gateway, "Service", "gateway")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["metrics"] == port
    monitor = find(docs_of(crm, "k8s/monitoring.yaml"), "ServiceMonitor", "gateways")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    policy = find(docs_of(crm, "k8s/edge.yaml"), "NetworkPolicy", "gateway-from-edge-only")
    api, metrics = policy["spec"]["ingress"]
    assert api["from"] == [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/part-of": "crm-copilot", "app.kubernetes.io/component": "edge",
        "app.kubernetes.io/managed-by": "inhouse"}}}]  # fmt: skip
    assert metrics["ports"] == [{"protocol": "TCP", "port": port}]
    assert "namespaceSelector" in metrics["from"][0]
    stack = yaml.safe_load(find(gateway, "ConfigMap", "gateway-config")["data"]["stack.yaml"])
    assert stack["gateway"]["server"]["trusted_proxies"] == ["0.0.0.0/0", "::/0"]
