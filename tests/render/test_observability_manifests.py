"""The observability stack's Kubernetes objects: the kubernetes-validate command itself on the
rendered CRM stack, and what the exporters and scrape Services must get right."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml

from inhouse.render import Rendered
from inhouse.render.options import RenderOptions
from inhouse.render.prometheus_config import GATEWAY_SCRAPE_SERVICE


def objects(rendered: Rendered, path: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered.files[path])}


@pytest.mark.skipif(shutil.which("kubernetes-validate") is None, reason="no kubernetes-validate")
def test_the_kubernetes_validate_command_passes_strict(crm: Rendered, write_rendered: Any) -> None:
    out = write_rendered(crm.files)
    files = sorted(str(p) for p in (out / "k8s").glob("*.yaml"))
    version = RenderOptions().kubernetes_version
    done = subprocess.run(
        ["kubernetes-validate", "--strict", "-k", version, *files],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    assert "passed for resource daemonset/dcgm-exporter" in report
    assert "passed for resource statefulset/loki" in report
    # Custom resources have no schema there: test_k8s.py checks them against their CRDs' subset.
    warned = {
        line.split("kind ")[1].split(" ")[0] for line in report.splitlines() if "WARN" in line
    }
    assert warned <= {"ServiceMonitor", "PrometheusRule", "ScaledObject"}


def test_dcgm_exporter_runs_on_gpu_nodes_with_the_alerts_counters(crm: Rendered) -> None:
    found = objects(crm, "k8s/exporters.yaml")
    pod = found[("DaemonSet", "dcgm-exporter")]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    container = pod["containers"][0]
    assert container["args"][:2] == ["-f", "/etc/dcgm-exporter/dcgm-metrics.csv"]
    assert "SYS_ADMIN" in container["securityContext"]["capabilities"]["add"]
    csv = found[("ConfigMap", "dcgm-exporter-counters")]["data"]["dcgm-metrics.csv"]
    for field in ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_GPU_TEMP",
                  "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                  "DCGM_FI_PROF_DRAM_ACTIVE"):  # fmt: skip
        assert f"\n{field}," in "\n" + csv, field
    monitor = found[("ServiceMonitor", "dcgm-exporter")]["spec"]["endpoints"][0]
    assert monitor["honorLabels"] is True
    assert found[("Service", "dcgm-exporter")]["spec"]["clusterIP"] == "None"


def test_node_exporter_runs_everywhere_reading_the_host_read_only(crm: Rendered) -> None:
    pod = objects(crm, "k8s/exporters.yaml")[("DaemonSet", "node-exporter")]["spec"]["template"]
    spec = pod["spec"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    mount = spec["containers"][0]["volumeMounts"][0]
    assert (mount["mountPath"], mount["readOnly"]) == ("/host", True)


def test_gateway_scrape_service_selects_the_gateway_pods(crm: Rendered) -> None:
    service = objects(crm, "k8s/exporters.yaml")[("Service", GATEWAY_SCRAPE_SERVICE)]
    gateway = objects(crm, "k8s/gateway.yaml")[("Deployment", "gateway")]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]
    ports = gateway["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert service["spec"]["ports"][0]["targetPort"] in {p["containerPort"] for p in ports}
    jobs = yaml.safe_load(crm.files["prometheus/prometheus.yml"])["scrape_configs"]
    (gateway_job,) = [j for j in jobs if j["job_name"] == "gateway"]
    dns = gateway_job["dns_sd_configs"][0]
    assert dns["names"] == [f"{GATEWAY_SCRAPE_SERVICE}.crm-copilot.svc.cluster.local"]
    assert dns["port"] == service["spec"]["ports"][0]["port"]
