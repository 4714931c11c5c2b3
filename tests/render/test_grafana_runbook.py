from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from tests.render.conftest import PlannedCrm

from inhouse.render import Rendered, render_stack
from inhouse.render.alerts_triggers import NAMES, rule_threshold
from inhouse.render.dashboard_guide import DASHBOARDS, FIRST_LOOK, dashboard_title
from inhouse.spec.stack import parse_stack
from inhouse.spec.triggers import TOKEN_HISTOGRAMS

BOARDS = ("fleet", "slo", "latency", "engine", "kv-cache", "hardware", "cost", "tenants")


def test_dashboards_are_importable_with_a_datasource_variable(crm: Rendered) -> None:
    uids = set()
    for key in BOARDS:
        model = json.loads(crm.files[f"grafana/{key}.json"])
        assert model["id"] is None
        uids.add(model["uid"])
        variables = {v["name"]: v for v in model["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids))
        panels = [p for p in model["panels"] if p["type"] != "row"]
        assert panels
        for panel in panels:
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24
    assert len(uids) == len(BOARDS)


def test_slo_dashboard_draws_each_pool_alarm(crm: Rendered) -> None:
    model = json.loads(crm.files["grafana/slo.json"])
    rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
    assert "Pool chat (chat-70b)" in rows
    ttft = next(p for p in model["panels"] if p["title"] == "TTFT")
    steps = ttft["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert steps[-1]["value"] == 1.0


def test_tenant_dashboard_reads_the_gateway(crm: Rendered) -> None:
    text = crm.files["grafana/tenants.json"]
    for name in ("inhouse_gateway_requests_total", "inhouse_gateway_tokens_total"):
        assert name in text
    assert "$usd_per_hour" in text
    variables = {v["name"]: v for v in json.loads(text)["templating"]["list"]}
    # the stack's observability.usd_per_hour (tests/plan/test_example_cost.py derives it)
    assert variables["usd_per_hour"]["query"] == "15.38"


def test_runbook_has_a_section_for_every_alert_link(crm: Rendered) -> None:
    runbook = crm.files["runbook.md"]
    anchors = {h.lower() for h in re.findall(r"^## (\w+)$", runbook, flags=re.MULTILINE)}
    links = set(re.findall(r"runbook_url: runbook\.md#(\w+)", crm.files["prometheus/rules.yaml"]))
    assert links and links <= anchors
    section = runbook.split("## InhouseGPUDoubleBitECC", 1)[1].split("\n## ", 1)[0]
    for part in ("**What it means.**", "```promql", "**Mitigations.**", "**Escalate.**"):
        assert part in section
    assert "| chat-1 | chat | chat-70b | 4 | 4,5,6,7 |" in runbook


def test_the_alert_table_names_each_rule_once_with_what_it_watches(crm: Rendered) -> None:
    """A rule rendered once per workload (burn rates, traffic above plan) gets a row per
    workload that says which: two identical rows left the operator guessing which one paged."""
    runbook = crm.files["runbook.md"]
    table = runbook.split("## Alerts\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert len(rows) == len(set(rows)), [r for r in rows if rows.count(r) > 1]
    rules = yaml.safe_load(crm.files["prometheus/rules.yaml"])["groups"]
    burns = [r for g in rules for r in g["rules"] if r.get("alert") == "InhouseErrorBudgetBurnFast"]
    for rule in burns:
        watched = rule["labels"].get("workload", rule["labels"]["pool"])
        assert any("InhouseErrorBudgetBurnFast" in r and f"| {watched} |" in r for r in rows)


def test_every_page_alert_names_the_panel_to_look_at_first(crm: Rendered) -> None:
    rules = yaml.safe_load(crm.files["prometheus/rules.yaml"])["groups"]
    alerts = {r["alert"]: r for g in rules for r in g["rules"] if "alert" in r}
    for name, rule in alerts.items():
        look = FIRST_LOOK.get(name)
        if rule["labels"]["severity"] == "page":
            assert look is not None, f"{name}: add its FirstLook to render/dashboard_guide.py"
        if look is None:
            continue
        model = json.loads(crm.files[f"grafana/{look.dashboard}.json"])
        titles = {p["title"] for p in model["panels"]}
        assert look.panel in titles, (name, look.panel, look.dashboard)
    runbook = crm.files["runbook.md"]
    section = runbook.split("## InhouseKVCacheFull", 1)[1].split("\n## ", 1)[0]
    assert "**Look first.** Dashboard *KV cache* (`grafana/kv-cache.json`)" in section
    for board in DASHBOARDS:
        assert f"| {board.title} | `grafana/{board.key}.json` |" in runbook
        assert f"grafana/{board.key}.json" in crm.files


def test_docs_name_each_dashboard_and_the_first_look_of_each_page_alert(crm: Rendered) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "render.md").read_text()
    for board in DASHBOARDS:
        assert f"| {board.title} | `grafana/{board.key}.json` |" in docs, board.key
    table = docs.split("### What to look at first, per page alert", 1)[1].split("\n## ", 1)[0]
    rules = yaml.safe_load(crm.files["prometheus/rules.yaml"])["groups"]
    pages = {
        r["alert"]
        for g in rules
        for r in g["rules"]
        if r.get("labels", {}).get("severity") == "page"
    }
    for name in pages:
        look = FIRST_LOOK[name]
        assert f"| {name} | {dashboard_title(look.dashboard)} | {look.panel} |" in table, name


def board_uids(stack_name: str) -> list[str]:
    pool = {"name": "chat", "model": "llama-3.1-8b"}
    rendered = render_stack(parse_stack({"name": stack_name, "pools": [pool]}))
    return [json.loads(rendered.files[f"grafana/{key}.json"])["uid"] for key in BOARDS]


def test_each_board_of_a_long_named_stack_keeps_its_own_uid() -> None:
    """Grafana refuses a uid over 40 characters and provisions one dashboard per uid: cut to
    40, `inhouse-<stack>-<board>` of a 32-character stack name was the same for all eight."""
    for name in ("customer-support-copilot-prod-eu", "s" * 40):
        uids = board_uids(name)
        assert len(set(uids)) == len(BOARDS), uids
        assert all(len(uid) <= 40 for uid in uids), uids
    # Two such stacks in one Grafana do not take each other's boards.
    assert not set(board_uids("a" * 39 + "b")) & set(board_uids("a" * 39 + "c"))


def test_the_token_length_panels_draw_the_plans_re_plan_triggers(
    crm_plan: PlannedCrm, crm: Rendered
) -> None:
    """No panel showed output length, though InhouseReplanOutputsLonger watches its p95. The
    KV cache board shows prompt and output length side by side (p50, p95, p99 of vLLM's
    histograms), each with a line at the level of each of the plan's triggers on that p95 (the
    rule's number), and the two re-plan tickets name them as the panels to look at first."""
    model = json.loads(render_stack(crm_plan.stack).files["grafana/kv-cache.json"])
    titles = [p["title"] for p in model["panels"]]
    assert titles[titles.index("Prompt length") + 1] == "Output length"
    for title, signal in (
        ("Prompt length", "prompt_tokens_p95"),
        ("Output length", "output_tokens_p95"),
    ):
        panel = model["panels"][titles.index(title)]
        exprs = [t["expr"] for t in panel["targets"]]
        histogram = TOKEN_HISTOGRAMS[signal][0]
        assert sum(f"rate({histogram}_bucket{{" in e for e in exprs) == 3, exprs
        triggers = [t for t in crm_plan.stack.triggers if t.signal == signal]
        assert triggers, signal
        lines = {
            t["legendFormat"]: t["expr"]
            for t in panel["targets"]
            if t["expr"].startswith("vector(")
        }
        assert lines == {
            f"{t.model} re-plan trigger": f"vector({rule_threshold(t):.10g})" for t in triggers
        }
        assert FIRST_LOOK[NAMES[signal]].dashboard == "kv-cache"
        assert FIRST_LOOK[NAMES[signal]].panel == title
    # A stack without triggers (the hand-written examples): the lengths, no line.
    plain = json.loads(crm.files["grafana/kv-cache.json"])
    panel = next(p for p in plain["panels"] if p["title"] == "Output length")
    assert panel["targets"] and not any(t["expr"].startswith("vector(") for t in panel["targets"])
