from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inhouse.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CRM = ROOT / "examples" / "crm-copilot" / "stack.yaml"
TOPO = ROOT / "tests" / "topology" / "data"


def test_render_writes_every_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["render", str(CRM), "--out", str(tmp_path), "--namespace", "crm"]
    args += ["--page-webhook", "http://pager.local/hook"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "rendered 27 files" in out
    assert "no `slo` section" not in err  # the CRM example states its SLO table
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == [
        "alertmanager/alertmanager.yml",
        "grafana/cost.json",
        "grafana/engine.json",
        "grafana/fleet.json",
        "grafana/hardware.json",
        "grafana/kv-cache.json",
        "grafana/latency.json",
        "grafana/provisioning/dashboards/inhouse.yaml",
        "grafana/provisioning/datasources/inhouse.yaml",
        "grafana/slo.json",
        "grafana/tenants.json",
        "k8s/dcgm-exporter-counters.yaml",
        "k8s/edge.yaml",
        "k8s/engine-chat.yaml",
        "k8s/engine-networkpolicy.yaml",
        "k8s/exporters.yaml",
        "k8s/gateway.yaml",
        "k8s/grafana.yaml",
        "k8s/logging.yaml",
        "k8s/monitoring.yaml",
        "k8s/namespace.yaml",
        "k8s/tracing.yaml",
        "prometheus/prometheus.yml",
        "prometheus/rules.yaml",
        "prometheus/rules_test.yaml",
        "runbook.md",
        "vllm/chat.sh",
    ]
    assert (tmp_path / "vllm" / "chat.sh").stat().st_mode & 0o111
    routes = yaml.safe_load((tmp_path / "alertmanager" / "alertmanager.yml").read_text())
    urls = {r["name"]: r["webhook_configs"][0]["url"] for r in routes["receivers"]}
    assert urls["page"] == "http://pager.local/hook"
    namespace = yaml.safe_load((tmp_path / "k8s" / "namespace.yaml").read_text())
    assert namespace["metadata"]["name"] == "crm"


def test_render_of_a_bad_stack_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(
        "version: 1\nname: x\npools:\n  - name: a\n    model: Llama-3.1-8B\n"
        "    slo: {ttft_p95_ms: 800, ttft_alarm_ms: 500}\n"
    )
    assert main(["render", str(stack), "--out", str(tmp_path / "out")]) == 2
    assert "ttft_alarm_ms (500.0) is below ttft_p95_ms" in capsys.readouterr().err


def test_check_topology_passes_on_sxm(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check", "topology", str(TOPO / "h100-sxm-8gpu.topo"), "--stack", str(CRM)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "NVLink domains: [0,1,2,3,4,5,6,7]" in out
    assert "ok    pool chat replica 1 (GPUs 4,5,6,7)" in out


def test_check_topology_fails_naming_the_pair(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check", "topology", str(TOPO / "h100-pcie-bridged-8gpu.topo"), "--stack", str(CRM)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "FAIL  pool chat replica 0 (GPUs 0,1,2,3)" in out
    assert "pool chat replica 0 (GPUs 0,1,2,3): GPU0-GPU2 joined by NODE, not NVLink" in out


def test_check_topology_groups_and_tp(capsys: pytest.CaptureFixture[str]) -> None:
    topo = str(TOPO / "h100-pcie-bridged-8gpu.topo")
    assert main(["check", "topology", topo, "--tp", "2"]) == 0
    assert main(["check", "topology", topo, "--group", "6,7", "--group", "1,2"]) == 1
    assert "group 1,2: GPU1-GPU2 joined by NODE, not NVLink" in capsys.readouterr().out
    assert main(["check", "topology", topo, "--group", "1,x"]) == 2
