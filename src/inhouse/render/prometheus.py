"""`prometheus/rules.yaml` and `prometheus/rules_test.yaml` for a stack."""

from __future__ import annotations

from inhouse.render.alerts import Alert, Recording, render_rule_tests, render_rules
from inhouse.render.alerts_burn import burn_recordings, stack_burn_alerts
from inhouse.render.alerts_gpu import gpu_rules
from inhouse.render.alerts_ops import engine_rules
from inhouse.render.alerts_slo import latency_alerts, latency_recordings
from inhouse.render.alerts_triggers import replan_alerts
from inhouse.spec.stack import StackSpec


def stack_rules(stack: StackSpec, namespace: str) -> tuple[list[Recording], list[Alert]]:
    recordings = latency_recordings(stack) + burn_recordings(stack)
    alerts = latency_alerts(stack) + stack_burn_alerts(stack)
    alerts += engine_rules(stack, namespace)
    alerts += gpu_rules(stack)
    alerts += replan_alerts(stack)
    return recordings, alerts


def render_prometheus(stack: StackSpec, namespace: str, runbook_url: str) -> dict[str, str]:
    recordings, alerts = stack_rules(stack, namespace)
    return {
        "prometheus/rules.yaml": render_rules(recordings, alerts, runbook_url),
        "prometheus/rules_test.yaml": render_rule_tests(alerts, runbook_url),
    }
