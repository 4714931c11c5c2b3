"""`prometheus/rules.yaml` and `prometheus/rules_test.yaml` for a stack."""

from __future__ import annotations

from inhouse.render.alerts import Alert, Recording, render_rule_tests, render_rules
from inhouse.render.alerts_burn import burn_recordings, stack_burn_alerts
from inhouse.render.alerts_gpu import gpu_rules
from inhouse.render.alerts_itl import pool_itl_alerts
from inhouse.render.alerts_ops import engine_rules
from inhouse.render.alerts_slo import latency_alerts, latency_recordings
from inhouse.render.alerts_triggers import replan_alerts
from inhouse.render.layout import EngineLayout, engine_layout
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import StackSpec

Rules = tuple[list[Recording], list[Alert]]


def stack_rules(stack: StackSpec, namespace: str, options: RenderOptions | None = None) -> Rules:
    """The stack's recording rules and alerts (its engine layout derived here)."""
    return layout_rules(stack, engine_layout(stack), namespace, options)


def layout_rules(
    stack: StackSpec, engines: EngineLayout, namespace: str, options: RenderOptions | None = None
) -> Rules:
    """The stack's recording rules and alerts, for the layout `render_stack` derived once;
    `options` as the manifests are rendered (the engines' grace periods), default if None."""
    recordings = latency_recordings(stack) + burn_recordings(stack)
    alerts = latency_alerts(stack, engines) + pool_itl_alerts(stack, engines)
    alerts += stack_burn_alerts(stack)
    alerts += engine_rules(stack, engines, namespace, options or RenderOptions())
    alerts += gpu_rules(engines)
    alerts += replan_alerts(stack)
    return recordings, alerts


def render_prometheus(stack: StackSpec, namespace: str, runbook_url: str) -> dict[str, str]:
    return rule_files(stack_rules(stack, namespace), runbook_url)


def rule_files(rules: Rules, runbook_url: str) -> dict[str, str]:
    """`prometheus/rules.yaml` and its promtool tests, of `rules` (`stack_rules`)."""
    recordings, alerts = rules
    return {
        "prometheus/rules.yaml": render_rules(recordings, alerts, runbook_url),
        "prometheus/rules_test.yaml": render_rule_tests(alerts, runbook_url),
    }
