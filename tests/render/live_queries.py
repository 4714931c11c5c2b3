"""Load for a live stack, and the PromQL of dashboards and rules run against its Prometheus."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import promql_parser

# What Grafana puts in for its built-in variables when the test runs a panel's query.
GRAFANA_BUILTINS = {
    "__rate_interval": "30s",
    "__range": "2m",
    "__range_s": "120",
    "__interval": "1s",
}
SYSTEM = (
    "You are the CRM copilot of an enterprise. Answer from the customer record below; cite the "
    "field you used. Never invent an account number. "
) * 8


@dataclass(frozen=True, slots=True)
class Query:
    where: str  # "grafana/fleet.json: Request rate" or "rules.yaml: InhouseKVCacheFull"
    expr: str
    needs_data: bool = True


def drive_load(gateway: str, key: str, duration_s: float, models: tuple[str, ...]) -> int:
    """Streaming chat sessions on a shared system prompt from a few threads; returns requests."""
    stop = time.monotonic() + duration_s
    done = [0]

    def worker(index: int) -> None:
        with httpx.Client(base_url=gateway, timeout=30.0) as client:
            turn = 0
            while time.monotonic() < stop:
                model = models[(index + turn) % len(models)]
                body = {
                    "model": model,
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"session {index} turn {turn}: summarize"},
                    ],
                    "max_tokens": 24,
                    "stream": True,
                }
                headers = {"authorization": f"Bearer {key}"}
                with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                    for _ in r.iter_bytes():
                        pass
                done[0] += 1
                turn += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done[0]


def substitute(expr: str, variables: dict[str, str]) -> str:
    """A dashboard expression with `$name`/`${name}` replaced as Grafana would."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in variables:
            return variables[name]
        if name in GRAFANA_BUILTINS:
            return GRAFANA_BUILTINS[name]
        raise AssertionError(f"{expr!r}: variable ${name} is not defined by the dashboard")

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def dashboard_variables(model: dict[str, Any]) -> dict[str, str]:
    """Query variables take their 'All' value; text boxes and constants their default."""
    values = {}
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            values[var["name"]] = var.get("allValue") or ".*"
        elif var["type"] in ("textbox", "constant", "custom"):
            values[var["name"]] = str(var.get("query", ""))
    return values


def dashboard_queries(path: str, model: dict[str, Any]) -> Iterator[Query]:
    variables = dashboard_variables(model)
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            yield Query(f"{path}: {panel['title']}", substitute(target["expr"], variables))
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            definition = var["query"]["query"]
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", definition)
            assert match, f"{path}: variable {var['name']}: {definition}"
            yield Query(f"{path}: variable {var['name']}", f"count by ({match[2]}) ({match[1]})")


def vector_selectors(expr: str) -> list[str]:
    """Every vector selector of an expression (by Prometheus's grammar, not a regex)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        kind = type(node).__name__
        if kind == "VectorSelector":
            found.append(str(node))
            return
        if kind == "MatrixSelector":
            walk(node.vector_selector)
            return
        for attr in ("lhs", "rhs", "expr", "args", "param"):
            child = getattr(node, attr, None)
            for item in child if isinstance(child, list | tuple) else [child]:
                if item is not None:
                    walk(item)

    walk(promql_parser.parse(expr))
    return found


def rule_queries(groups: list[dict[str, Any]]) -> Iterator[Query]:
    """Recording rules must return data; an alert's expression must evaluate, and each of its
    selectors must find series (a healthy stack keeps most alerts silent, rightly)."""
    for group in groups:
        for rule in group["rules"]:
            if "record" in rule:
                yield Query(f"rules.yaml: {rule['record']}", rule["record"])
                continue
            name = rule["alert"]
            yield Query(f"rules.yaml: {name}", rule["expr"], needs_data=False)
            for selector in vector_selectors(rule["expr"]):
                yield Query(f"rules.yaml: {name} selector", selector)


def run_query(prometheus: str, query: Query) -> tuple[str, list[dict[str, Any]]]:
    """(error, result): error is '' when Prometheus evaluated it."""
    reply = httpx.get(f"{prometheus}/api/v1/query", params={"query": query.expr}, timeout=30)
    body = reply.json()
    if body.get("status") != "success":
        return f"{body.get('errorType')}: {body.get('error')}", []
    return "", body["data"]["result"]


def has_value(result: list[dict[str, Any]]) -> bool:
    """At least one sample that is a number (a quantile over no observations is NaN)."""
    return any(not math.isnan(float(r["value"][1])) for r in result if "value" in r)
