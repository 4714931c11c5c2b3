"""The rendered prometheus.yml and alertmanager.yml: checked by promtool and amtool, and the
page/ticket routes proven with amtool's own route tester."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from inhouse.render import Rendered
from inhouse.render.prometheus_config import (
    Receiver,
    alertmanager_config,
    local_scrape_jobs,
    prometheus_config,
)
from inhouse.render.yamltext import dump_yaml
from inhouse.spec.stack import StackSpec

PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian `prometheus`, .ci/apt-packages.txt)"
)
needs_amtool = pytest.mark.skipif(
    AMTOOL is None,
    reason="amtool not installed (Debian `prometheus-alertmanager`, .ci/apt-packages.txt)",
)


def run(tool: str | None, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert tool is not None
    return subprocess.run(
        [tool, *args], cwd=directory, capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
@pytest.mark.parametrize("example", ["crm-copilot", "code-assistant"])
def test_promtool_check_config_passes(
    rendered: dict[str, Rendered], example: str, write_rendered: Any
) -> None:
    out = write_rendered(rendered[example].files) / "prometheus"
    check = run(PROMTOOL, out, "check", "config", "prometheus.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS" in check.stdout and "rules found" in check.stdout


@needs_promtool
def test_promtool_check_config_fails_on_a_broken_job(crm: Rendered, write_rendered: Any) -> None:
    out = write_rendered(crm.files) / "prometheus"
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    config["scrape_configs"].append(dict(config["scrape_configs"][0]))  # duplicate job name
    (out / "prometheus.yml").write_text(yaml.safe_dump(config))
    assert run(PROMTOOL, out, "check", "config", "prometheus.yml").returncode != 0


def test_scrape_jobs_carry_the_labels_the_alerts_select(crm: Rendered) -> None:
    config = yaml.safe_load(crm.files["prometheus/prometheus.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"chat-engine", "gateway", "dcgm-exporter", "node-exporter"}
    replicas = jobs["chat-engine"]["static_configs"]
    assert [g["labels"]["pod"] for g in replicas] == ["chat-0", "chat-1"]
    assert replicas[1]["targets"] == ["chat-1.crm-copilot.svc.cluster.local:8000"]
    assert jobs["dcgm-exporter"]["honor_labels"] is True
    assert config["rule_files"] == ["rules.yaml"]


@needs_amtool
def test_amtool_check_config_and_routes(crm: Rendered, write_rendered: Any) -> None:
    out = write_rendered(crm.files) / "alertmanager"
    check = run(AMTOOL, out, "check-config", "alertmanager.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    for labels, receiver in (
        (["severity=page", "alertname=InhouseGPUDoubleBitECC"], "page"),
        (["severity=ticket", "alertname=InhousePrefixHitRateLow"], "ticket"),
        (["alertname=Watchdog"], "ticket"),
    ):
        routed = run(AMTOOL, out, "config", "routes", "test", "--config.file=alertmanager.yml",
                     *labels)  # fmt: skip
        assert routed.stdout.strip() == receiver, (labels, routed.stdout, routed.stderr)


@needs_amtool
def test_amtool_refuses_a_route_to_a_missing_receiver(tmp_path: Path) -> None:
    config = alertmanager_config(Receiver("page", "http://a/p"), Receiver("ticket", "http://a/t"))
    config["route"]["routes"][0]["receiver"] = "pager-typo"
    (tmp_path / "am.yml").write_text(dump_yaml(config))
    assert run(AMTOOL, tmp_path, "check-config", "am.yml").returncode != 0


@needs_promtool
def test_local_jobs_for_a_stack_on_one_machine_pass_promtool(
    crm_stack: StackSpec, tmp_path: Path
) -> None:
    """What a drill or the live-query test scrapes: the same job names and labels."""
    jobs = local_scrape_jobs(
        crm_stack,
        "crm-copilot",
        {"chat": ["http://127.0.0.1:8100", "http://127.0.0.1:8101"]},
        gateway="http://127.0.0.1:8000",
        dcgm="http://127.0.0.1:9400",
        node="http://127.0.0.1:9100",
        interval="1s",
    )
    config = prometheus_config(jobs, alertmanagers=["127.0.0.1:9093"], scrape_interval="1s")
    (tmp_path / "prometheus.yml").write_text(dump_yaml(config))
    check = run(PROMTOOL, tmp_path, "check", "config", "prometheus.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    assert config["global"]["scrape_timeout"] == "1s"
    engine = jobs[0]["static_configs"][1]
    assert engine == {
        "targets": ["127.0.0.1:8101"],
        "labels": {
            "namespace": "crm-copilot",
            "pod": "chat-1",
            "pool": "chat",
            "replica": "1",
            "service": "chat-engine",
        },
    }
