from __future__ import annotations

import shutil
from collections import Counter
from typing import Any

import pytest
import yaml
from tests.render.promtool_scenarios import promtool

from inhouse.render import Rendered, render_stack
from inhouse.render.alerts import quiet_case
from inhouse.render.prometheus import stack_rules
from inhouse.spec.stack import StackSpec, parse_stack

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian package `prometheus`; CI installs it from "
    ".ci/apt-packages.txt)",
)
PAGE_ALERTS = {
    "InhouseE2EP95OverSLO",
    "InhouseTTFTP95OverSLO",
    "InhouseITLP95OverSLO",
    "InhouseErrorBudgetBurnFast",
    "InhouseEngineReplicasMissing",
    "InhouseEnginePoolBelowDegraded",
    "InhouseEngineReplicaFlapping",
    "InhouseKVCacheFull",
    "InhouseGatewayDown",
    "InhouseGPUDoubleBitECC",
    "InhouseGPUFatalXid",
}
TICKET_ALERTS = {
    "InhouseEngineReplicaDown",
    "InhouseErrorBudgetBurnSlow",
    "InhousePreemptionsSustained",
    "InhousePrefixHitRateLow",
    "InhouseQueueBacklog",
    "InhouseGPUTemperatureHigh",
    "InhouseGPUPowerAtLimit",
    "InhouseGPUHBMBandwidthLow",
    "InhouseGatewayEventLoopLagging",
}


def rules_of(rendered: Rendered) -> list[dict[str, Any]]:
    groups = yaml.safe_load(rendered.files["prometheus/rules.yaml"])["groups"]
    return [rule for group in groups for rule in group["rules"]]


@needs_promtool
@pytest.mark.parametrize("example", ["crm-copilot", "code-assistant"])
def test_promtool_checks_and_tests_pass(
    rendered: dict[str, Rendered], example: str, write_rendered: Any
) -> None:
    out = write_rendered(rendered[example].files) / "prometheus"
    check = promtool(out, "check", "rules", "rules.yaml")
    assert check.returncode == 0, check.stdout + check.stderr
    test = promtool(out, "test", "rules", "rules_test.yaml")
    assert test.returncode == 0, test.stdout + test.stderr


@needs_promtool
def test_the_tests_fail_when_an_alert_can_no_longer_fire(
    crm: Rendered, write_rendered: Any
) -> None:
    """Mutation check: an alert whose rule never fires fails its 'fire' case."""
    out = write_rendered(crm.files) / "prometheus"
    rules = yaml.safe_load((out / "rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["expr"] = "vector(1) > 2"
    (out / "rules.yaml").write_text(yaml.safe_dump(rules))
    test = promtool(out, "test", "rules", "rules_test.yaml")
    assert test.returncode == 1
    for name in PAGE_ALERTS | TICKET_ALERTS:
        assert f"alertname: {name}," in test.stdout + test.stderr, name


@needs_promtool
def test_the_tests_fail_when_an_alert_fires_on_healthy_data(
    crm: Rendered, write_rendered: Any
) -> None:
    """Mutation check: an alert that always fires fails its 'silent' case."""
    out = write_rendered(crm.files) / "prometheus"
    tests = yaml.safe_load((out / "rules_test.yaml").read_text())
    tests["tests"] = [
        t for t in tests["tests"] if t["alert_rule_test"][0]["alertname"] == "InhouseKVCacheFull"
    ]
    (out / "rules_test.yaml").write_text(yaml.safe_dump(tests))
    rules = yaml.safe_load((out / "rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == "InhouseKVCacheFull":
                rule["expr"] = rule["expr"].replace("> 0.95", ">= 0")
    (out / "rules.yaml").write_text(yaml.safe_dump(rules))
    test = promtool(out, "test", "rules", "rules_test.yaml")
    assert test.returncode == 1
    assert "alertname: InhouseKVCacheFull, time: 2m" in test.stdout + test.stderr


def test_every_alert_has_severity_summary_and_runbook(crm: Rendered) -> None:
    alerts = [r for r in rules_of(crm) if "alert" in r]
    names = {a["alert"] for a in alerts}
    assert names == PAGE_ALERTS | TICKET_ALERTS
    for alert in alerts:
        expected = "page" if alert["alert"] in PAGE_ALERTS else "ticket"
        assert alert["labels"]["severity"] == expected, alert["alert"]
        assert alert["annotations"]["summary"]
        assert alert["annotations"]["runbook_url"] == f"runbook.md#{alert['alert'].lower()}"


def test_the_discovery_alert_comes_with_scaled_pools_only(rendered: dict[str, Rendered]) -> None:
    """The code assistant's pools are scaled (the gateway finds their pods by DNS); the CRM
    copilot's replicas are static, and its gateway exports no discovery series to alert on."""
    for example, scaled in (("code-assistant", True), ("crm-copilot", False)):
        names = {r["alert"] for r in rules_of(rendered[example]) if "alert" in r}
        assert ("InhouseGatewayDiscoveryFailing" in names) == scaled, example


def test_every_alert_has_a_firing_and_a_silent_case(crm_stack: StackSpec) -> None:
    _, alerts = stack_rules(crm_stack, "crm-copilot")
    for alert in alerts:
        assert any(c.expect is not None for c in alert.cases), alert.name
        assert quiet_case(alert).expect is None


def test_rules_test_file_asserts_both_outcomes_per_alert(crm: Rendered) -> None:
    tests = yaml.safe_load(crm.files["prometheus/rules_test.yaml"])["tests"]
    outcomes: Counter[tuple[str, bool]] = Counter()
    for test in tests:
        for check in test["alert_rule_test"]:
            outcomes[(check["alertname"], bool(check["exp_alerts"]))] += 1
    for name in PAGE_ALERTS | TICKET_ALERTS:
        assert outcomes[(name, True)] >= 1 and outcomes[(name, False)] >= 1, name


def test_counters_carry_the_total_suffix(crm: Rendered) -> None:
    text = crm.files["prometheus/rules.yaml"]
    assert "vllm:num_preemptions_total" in text
    for bare in ("vllm:num_preemptions[", "vllm:prefix_cache_hits[", "vllm:prefix_cache_queries["):
        assert bare not in text


def test_slo_section_sets_the_alarm_thresholds() -> None:
    stack = parse_stack(
        {
            "name": "demo",
            "nodes": [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": 1}],
            "pools": [
                {
                    "name": "utility",
                    "model": "Qwen2.5-7B",
                    "slo": {
                        "ttft_p95_ms": 200,
                        "itl_p95_ms": 20,
                        "itl_alarm_ms": 30,
                        "e2e_p95_ms": 2000,
                        "e2e_alarm_ms": 3000,
                        "availability": 0.995,
                        "prefix_hit_rate_min": None,
                    },
                }
            ],
        }
    )
    rules = {r["alert"]: r for r in rules_of(render_stack(stack)) if "alert" in r}
    assert rules["InhouseTTFTP95OverSLO"]["expr"].endswith("> 0.2")
    assert rules["InhouseITLP95OverSLO"]["expr"].endswith("> 0.03")
    assert rules["InhouseE2EP95OverSLO"]["expr"].endswith("> 3")
    assert "> 0.072" in rules["InhouseErrorBudgetBurnFast"]["expr"]  # 14.4 x 0.005
    assert "InhousePrefixHitRateLow" not in rules


@needs_promtool
def test_custom_slo_rules_pass_promtool(write_rendered: Any) -> None:
    stack = parse_stack(
        {
            "name": "demo",
            "pools": [
                {
                    "name": "a",
                    "model": "Qwen2.5-7B",
                    "slo": {"ttft_p95_ms": 150, "e2e_p95_ms": 2000},
                },
                {"name": "b", "model": "Llama-3.1-8B", "gpu": "l40s", "replicas": 3},
            ],
        }
    )
    out = write_rendered(render_stack(stack).files) / "prometheus"
    test = promtool(out, "test", "rules", "rules_test.yaml")
    assert test.returncode == 0, test.stdout + test.stderr


def test_prometheus_rule_resource_carries_the_same_groups(crm: Rendered) -> None:
    docs = yaml.safe_load_all(crm.files["k8s/monitoring.yaml"])
    resource = next(d for d in docs if d["kind"] == "PrometheusRule")
    rules = yaml.safe_load(crm.files["prometheus/rules.yaml"])
    assert resource["spec"]["groups"] == rules["groups"]
