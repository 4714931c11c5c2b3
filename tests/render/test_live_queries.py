"""Every dashboard panel's and every rule's PromQL, run against a real Prometheus scraping the
live simulated CRM stack (engines, gateway), the DCGM-compatible exporter and node_exporter;
then a GPU fault goes through the rendered rule and the rendered Alertmanager routes to the
page receiver.

Each query must parse and evaluate; each must return data, except the few listed in
`NO_DATA_ON_SIMULATED` with the reason. A metric name nothing exposes, a label matcher nothing
matches, or a recording rule that records nothing fails the test: a blank panel at 3 a.m. is a
defect found too late.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from inhouse.render import render_stack
from inhouse.spec.stack import StackSpec

from .live_queries import (
    Query,
    dashboard_queries,
    drive_load,
    has_value,
    rule_queries,
    run_query,
)
from .live_stack import ALERTMANAGER, DEMO_KEY, NODE_EXPORTER, PROMETHEUS, live_stack, observed

NAMESPACE = "crm-copilot"
LOAD_S = 24.0
# Queries that return nothing on the simulated stack, and why. Keys are `Query.where` or a
# selector; each must be truly empty here (the test fails when one starts returning data, so
# the list cannot rot).
NO_DATA_ON_SIMULATED: dict[str, str] = {
    'rules.yaml: InhouseGPUFatalXid selector: DCGM_EXP_XID_ERRORS_COUNT{xid=~"48|79|95"}': (
        "dcgm-exporter writes a series per XID seen in its window; a healthy GPU has had no "
        "fatal XID (the drills inject one: the alert's promtool tests and tests/server cover it)"
    ),
}
# Queries that must come back empty, so that the check itself is shown to catch a misspelled
# name and a label value nothing carries.
CANARIES = (
    Query("canary: misspelled metric", "sum(rate(vllm:num_requests_runing[30s]))"),
    Query("canary: wrong job label", 'up{job="chat-engines"}'),
)

pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or NODE_EXPORTER is None or ALERTMANAGER is None,
    reason="needs Debian `prometheus`, `prometheus-node-exporter` and `prometheus-alertmanager` "
    "(.ci/apt-packages.txt)",
)


def _faults_during_load(live_admin: list[str], dcgm_admin: str, gateway: str) -> None:
    """What a real day has a little of: an application XID (13, not fatal), requests that fail
    on every replica (5xx after the gateway's retries), a client with a wrong key (401)."""
    time.sleep(LOAD_S / 3)
    httpx.post(f"{dcgm_admin}/faults/xid", json={"gpu": 0, "xid": 13}).raise_for_status()
    for admin in live_admin:
        httpx.post(f"{admin}/faults/fail", json={"count": 3, "status": 500}).raise_for_status()
    bad = {"authorization": "Bearer sk-wrong"}
    body = {"model": "chat-70b", "messages": [{"role": "user", "content": "hi"}]}
    reply = httpx.post(f"{gateway}/v1/chat/completions", json=body, headers=bad)
    assert reply.status_code == 401


def page_arrives(dcgm_admin: str, notifications: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """A double-bit ECC error on GPU 5: the rendered rule fires, the rendered routes page."""
    httpx.post(f"{dcgm_admin}/faults/ecc_dbe", json={"gpu": 5, "count": 1}).raise_for_status()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for path, body in list(notifications):
            for alert in body["alerts"]:
                labels = alert["labels"]
                if labels["alertname"] == "InhouseGPUDoubleBitECC" and labels["gpu"] == "5":
                    if path == "/page" and alert["status"] == "firing":
                        return []
                    return [f"InhouseGPUDoubleBitECC reached {path} ({alert['status']}), not /page"]
        time.sleep(0.5)
    return [f"no page for InhouseGPUDoubleBitECC within 60 s; received: {notifications}"]


def _rules(stack: StackSpec) -> list[dict[str, object]]:
    groups = yaml.safe_load(render_stack(stack).files["prometheus/rules.yaml"])["groups"]
    return [rule for group in groups for rule in group["rules"]]


def rule_health(prometheus: str, expected: int) -> list[str]:
    """Prometheus loaded every rendered rule and evaluated each without an error (a
    many-to-many match, say, only shows at evaluation)."""
    groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=30).json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    problems = [f"rule {r['name']}: {r['health']} {r.get('lastError', '')}" for r in rules
                if r["health"] != "ok"]  # fmt: skip
    if len(rules) != expected:
        problems.append(f"Prometheus loaded {len(rules)} rules, rules.yaml has {expected}")
    return problems


def _queries(stack: StackSpec) -> list[Query]:
    files = render_stack(stack).files
    queries: list[Query] = []
    for path, text in files.items():
        if path.startswith("grafana/") and path.endswith(".json"):
            queries += dashboard_queries(path, json.loads(text))
    queries += rule_queries(yaml.safe_load(files["prometheus/rules.yaml"])["groups"])
    return queries


def test_every_panel_and_rule_returns_live_data(crm_stack: StackSpec, tmp_path: Path) -> None:
    queries = _queries(crm_stack)
    assert len(queries) > 100
    with live_stack(crm_stack, tmp_path, NAMESPACE) as live, observed(live) as obs:
        faults = threading.Thread(
            target=_faults_during_load, args=(live.admin_urls, obs.dcgm_admin_url, live.gateway_url)
        )
        faults.start()
        # every model a workload names gets traffic: its SLO rules must return data
        models = tuple(w.model for w in crm_stack.workloads) or ("chat-70b", "utility-summarize")
        num_requests = drive_load(live.gateway_url, DEMO_KEY, LOAD_S, models)
        faults.join()
        assert num_requests > 20
        time.sleep(3)  # the last scrapes and a rule evaluation after them
        failures, empty = [], []
        for canary in CANARIES:
            error, result = run_query(obs.prometheus_url, canary)
            assert not error and not has_value(result), canary
        failures += rule_health(obs.prometheus_url, len(_rules(crm_stack)))
        for query in queries:
            error, result = run_query(obs.prometheus_url, query)
            if error:
                failures.append(f"{query.where}: {query.expr}\n    {error}")
            elif query.needs_data and not has_value(result):
                empty.append(query)
        failures += page_arrives(obs.dcgm_admin_url, obs.notifications)
    keys = {f"{q.where}: {q.expr}" for q in empty}
    failures += [f"no data: {key}" for key in sorted(keys - set(NO_DATA_ON_SIMULATED))]
    failures += [
        f"listed as empty, has data: {k}" for k in sorted(set(NO_DATA_ON_SIMULATED) - keys)
    ]
    assert not failures, "\n".join(failures)
