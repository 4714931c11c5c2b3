"""Alerts as data: each with its rule, runbook entry and the promtool cases that prove it.

An `Alert` renders into `prometheus/rules.yaml` (the rule), `prometheus/rules_test.yaml` (one
promtool test per `Case`: input series, and at `eval_time` either exactly the expected alert or
none) and `runbook.md` (its `RunbookEntry`). Keeping the three together means an alert cannot
ship without a test that makes it fire, a test that keeps it silent, and a page that says what
to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from inhouse.render.yamltext import dump_yaml

Severity = Literal["page", "ticket"]
# Rule evaluation in the tests: kube-prometheus-stack's default, and what `for: 30s` needs.
EVALUATION_INTERVAL = "30s"


@dataclass(frozen=True, slots=True)
class RunbookEntry:
    meaning: str
    first_promql: str
    mitigations: tuple[str, ...]
    escalate: str


@dataclass(frozen=True, slots=True)
class Series:
    labels: Mapping[str, str]
    values: str
    metric: str

    def selector(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels.items())
        return f"{self.metric}{{{inner}}}"


@dataclass(frozen=True, slots=True)
class Case:
    """A promtool test: `series` sampled every `interval`; at `eval_time` the alert fires with
    `expect` as its labels, or (expect None) does not fire at all."""

    name: str
    interval: str
    series: tuple[Series, ...]
    eval_time: str
    expect: Mapping[str, str] | None


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    group: str
    expr: str
    hold: str
    severity: Severity
    summary: str
    description: str
    runbook: RunbookEntry
    cases: tuple[Case, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    # Where the threshold came from (the plan's trigger, a workload's SLO, a default), for the
    # person paged: rendered as the `threshold_source` annotation.
    threshold_source: str = ""

    @property
    def anchor(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Recording:
    record: str
    group: str
    expr: str


def expand_labels(template: str, labels: Mapping[str, str]) -> str:
    """What Prometheus makes of `{{ $labels.x }}` in an annotation, for the expected values."""
    return re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def alert_rule(alert: Alert, runbook_url: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": alert.name, "expr": alert.expr}
    if alert.hold != "0s":
        rule["for"] = alert.hold
    rule["labels"] = {"severity": alert.severity, **alert.labels}
    rule["annotations"] = alert_annotations(alert, runbook_url)
    return rule


def alert_annotations(alert: Alert, runbook_url: str) -> dict[str, str]:
    notes = {
        "summary": alert.summary,
        "description": alert.description,
        "runbook_url": f"{runbook_url}#{alert.anchor}",
    }
    if alert.threshold_source:
        notes["threshold_source"] = alert.threshold_source
    return notes


def rule_groups(
    recordings: list[Recording], alerts: list[Alert], runbook_url: str
) -> list[dict[str, Any]]:
    """Prometheus rule groups: recordings first (a group evaluates its rules in order)."""
    order: list[str] = []
    for name in [r.group for r in recordings] + [a.group for a in alerts]:
        if name not in order:
            order.append(name)
    groups = []
    for name in order:
        rules: list[dict[str, Any]] = [
            {"record": r.record, "expr": r.expr} for r in recordings if r.group == name
        ]
        rules += [alert_rule(a, runbook_url) for a in alerts if a.group == name]
        groups.append({"name": name, "rules": rules})
    return groups


def render_rules(recordings: list[Recording], alerts: list[Alert], runbook_url: str) -> str:
    header = (
        "# Rendered by `inhouse render`. Check: promtool check rules rules.yaml; test:\n"
        "# promtool test rules rules_test.yaml. severity: page wakes someone; ticket waits for\n"
        "# working hours. Every alert links its runbook.md section.\n"
    )
    return header + dump_yaml({"groups": rule_groups(recordings, alerts, runbook_url)})


def expected_alert(alert: Alert, expect: Mapping[str, str], runbook_url: str) -> dict[str, Any]:
    """The alert as promtool's `exp_alerts` states it: its labels plus those its expression
    keeps (`expect`), and its annotations as Prometheus expands them."""
    labels = {"severity": alert.severity, **alert.labels, **expect}
    notes = alert_annotations(alert, runbook_url)
    notes["summary"] = expand_labels(alert.summary, labels)
    notes["description"] = expand_labels(alert.description, labels)
    return {"exp_labels": labels, "exp_annotations": notes}


def render_rule_tests(alerts: list[Alert], runbook_url: str, rules_file: str = "rules.yaml") -> str:
    tests = []
    for alert in alerts:
        background = _sibling_quiet_series(alert, alerts)
        for case in alert.cases:
            expected = []
            if case.expect is not None:
                expected.append(expected_alert(alert, case.expect, runbook_url))
            tests.append(
                {
                    "name": f"{alert.name}: {case.name}",
                    "interval": case.interval,
                    "input_series": [
                        {"series": s.selector(), "values": s.values}
                        for s in (*case.series, *background)
                    ],
                    "alert_rule_test": [
                        {
                            "eval_time": case.eval_time,
                            "alertname": alert.name,
                            "exp_alerts": expected,
                        }
                    ],
                }
            )
    header = (
        "# Rendered by `inhouse render`: for every alert a case that makes it fire and one that\n"
        "# keeps it silent. Run: promtool test rules rules_test.yaml\n"
    )
    return header + dump_yaml(
        {"rule_files": [rules_file], "evaluation_interval": EVALUATION_INTERVAL, "tests": tests}
    )


def quiet_case(alert: Alert) -> Case:
    for case in alert.cases:
        if case.expect is None:
            return case
    raise AssertionError(f"alert {alert.name} has no case that keeps it silent")


def _sibling_quiet_series(alert: Alert, alerts: list[Alert]) -> tuple[Series, ...]:
    """Healthy series for the other rules of the same name (other pools, other GPU types), so
    that in this alert's tests only this rule can fire (e.g. a 'replicas missing' rule fires
    on no data at all)."""
    return tuple(
        series
        for other in alerts
        if other.name == alert.name and other is not alert
        for series in quiet_case(other).series
    )
