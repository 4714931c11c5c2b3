"""Section 6's alert table: each threshold in the unit its SLO is stated in, and a compound
rule never reduced to one of its conditions."""

from __future__ import annotations

import json
import re

from inhouse.report.document import build_document
from inhouse.report.figures import Source
from inhouse.report.inputs import ReportInputs
from inhouse.report.rendered import Alert, read_alerts, threshold_text


def _alert_rows(inputs: ReportInputs) -> dict[str, list[str]]:
    text = build_document(inputs).markdown
    section = text.split("## 6. Observability")[1].split("\n## ")[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if line.startswith("| Inhouse") and cells[0] not in rows:
            rows[cells[0]] = cells
    return rows


def test_latency_thresholds_are_shown_in_ms(inputs: ReportInputs) -> None:
    """The rules compare seconds (`inhouse:gateway_ttft_seconds:p95_5m > 1`): the table printed
    "> 1" beside an SLO of 800 ms."""
    rows = _alert_rows(inputs)
    alerts = {a.name: a for a in read_alerts(inputs.render)}
    for name, metric in (("InhouseTTFTP95OverSLO", "ttft"), ("InhouseITLP95OverSLO", "itl")):
        alarm = inputs.plan.get("slo_check", "targets", "chat", metric, "alarm_ms")
        assert rows[name][2] == f"> {alarm:,g} ms", name  # the requirement's alarm, in ms
    kv = alerts["InhouseKVCacheFull"]
    assert rows["InhouseKVCacheFull"][2] == f"> {kv.threshold:g}"  # a fraction, as it is


def test_a_compound_rule_is_not_reduced_to_its_last_condition(inputs: ReportInputs) -> None:
    """The fast burn pages at 14.4x the budget *and* at least 10 errors in the hour: the table
    showed ">= 10", the guard, as if it were the threshold."""
    rows = _alert_rows(inputs)
    alerts = {a.name: a for a in read_alerts(inputs.render)}
    expr = alerts["InhouseErrorBudgetBurnFast"].expr
    assert len(re.findall(r"(?:>=|<=|==|>|<)\s*-?\d", expr)) > 1
    assert rows["InhouseErrorBudgetBurnFast"][2] == "several conditions (rules.yaml)"


def _alert(expr: str) -> Alert:
    comparator, threshold = expr.split()[-2], float(expr.split()[-1])
    return Alert("A", "ticket", "1h", expr, "chat", "", comparator, threshold, Source("r", "p"))


def test_a_histogram_quantile_in_seconds_is_a_latency_a_bucket_share_is_not() -> None:
    tpot = "histogram_quantile(0.5, sum by (le) (rate(vllm:x_seconds_bucket[1h]))) > 0.0401"
    assert threshold_text(_alert(tpot)) == "> 40.1 ms"
    share = (
        '1 - sum(rate(lag_seconds_bucket{le="0.025"}[5m])) / sum(rate(lag_seconds_count[5m]))'
        " > 0.05"
    )
    assert threshold_text(_alert(share)) == "> 0.05"


def test_a_workload_s_alarm_is_its_own_alert_not_a_pool_mate_s(inputs: ReportInputs) -> None:
    """Two workloads on one pool (utility rides chat's adapters) each get their own latency
    alert, labelled `workload`. The row took the first alert of the name on the pool: with a
    TTFT target for utility too, utility's row would have quoted chat's 1,000 ms alarm."""
    from dataclasses import replace

    from inhouse.report.inputs import Doc, RenderOutput
    from inhouse.report.slo import slo_rows

    rules = """groups:
- name: slo
  rules:
  - alert: InhouseTTFTP95OverSLO
    expr: inhouse:gateway_ttft_seconds:p95_5m{model="chat"} > 1
    labels: {severity: page, pool: chat, workload: chat}
  - alert: InhouseTTFTP95OverSLO
    expr: inhouse:gateway_ttft_seconds:p95_5m{model="utility"} > 0.4
    labels: {severity: page, pool: chat, workload: utility}
"""
    plan = json.loads(json.dumps(inputs.plan.data))
    plan["slo_check"]["targets"]["utility"]["ttft"] = {"target_ms": 300.0, "alarm_ms": 400.0}
    changed = replace(
        inputs,
        plan=Doc(inputs.plan.name, plan),
        render=RenderOutput("deploy", {"prometheus/rules.yaml": rules}),
    )
    rows = {f"{r.workload} {r.metric}": r for r in slo_rows(changed, read_alerts(changed.render))}
    alarm = rows["utility p95 TTFT"].alarm.figure
    assert alarm is not None and alarm.value == 400.0
    assert rows["chat p95 TTFT warm"].alarm.figure.value == 1000.0  # type: ignore[union-attr]


def test_an_absent_alert_has_no_threshold_but_says_what_it_watches(inputs: ReportInputs) -> None:
    """`absent(up{...job="gateway"} == 1)` fires when no gateway is scraped up; the table
    showed "== 1", the filter inside `absent()`, as if it were a level to cross."""
    rows = _alert_rows(inputs)
    alerts = {a.name: a for a in read_alerts(inputs.render)}
    down = alerts["InhouseGatewayDown"]
    assert down.expr.startswith("absent(") and "== 1" in down.expr
    assert down.threshold is None and down.comparator is None
    shown = rows["InhouseGatewayDown"][2]
    assert shown.startswith("—") and "== 1" not in shown, shown
    assert "gateway" in shown and "scraped up" in shown, shown
    assert rows["InhouseGatewayDown"][3] == down.hold  # "for 30s" beside it


def test_an_absent_over_anything_else_names_the_series() -> None:
    expr = 'absent(inhouse:gateway_ttft_seconds:p95_5m{pool="chat"})'
    alert = Alert("A", "page", "5m", expr, "chat", "", None, None, Source("r", "p"))
    shown = threshold_text(alert)
    assert shown.startswith("—") and 'inhouse:gateway_ttft_seconds:p95_5m{pool="chat"}' in shown


def test_alert_summaries_read_as_words_not_templates(inputs: ReportInputs) -> None:
    """Section 6 printed each alert's summary template as written ("p95 time to first token
    of {{ $labels.model_name }} above ..."): Prometheus syntax in the document a customer
    signs, and two rows of one alert (one per workload) that read the same."""
    rows = _alert_rows(inputs)
    for name, cells in rows.items():
        assert "{{" not in cells[5], (name, cells[5])
    assert rows["InhouseTTFTP95OverSLO"][5].startswith("p95 time to first token of chat above")
    # a label the rule does not fix stays a named placeholder
    assert "`pod`" in rows["InhouseEngineReplicaDown"][5]
