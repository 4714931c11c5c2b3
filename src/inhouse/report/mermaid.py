"""The one diagram: the deployment as a mermaid flowchart, from plan.json's pools and placement.

Clients -> L7 edge (Envoy: TLS, timeouts, limits) -> the gateway (tenants, limits, prefix-aware
routing) -> each replica on its NVLink group -> the node's verified weight cache; Prometheus
scrapes gateway and engines and Alertmanager pages. Nothing in it is a measured or priced
figure, so the public version draws the same diagram.
"""

from __future__ import annotations

import re
from typing import Any


def _id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def deployment_diagram(plan: dict[str, Any]) -> list[str]:
    policy = (plan.get("engine") or {}).get("routing_policy", "cache_aware")
    lines = [
        "flowchart LR",
        '  clients["client applications<br/>(HTTPS, API keys)"] --> '
        'edge["Envoy edge<br/>TLS, timeouts, size limits"]',
        f'  edge --> gw["inhouse gateway<br/>tenants, limits, {policy} routing"]',
    ]
    nodes: dict[int, list[str]] = {}
    for pool in plan.get("pools") or []:
        serves = ", ".join(pool.get("serves") or [])
        for index, placed in enumerate(pool.get("placement") or []):
            rid = _id(f"{pool['name']}_r{index}")
            gpus = placed.get("gpu_ids") or []
            span = f"GPUs {gpus[0]}-{gpus[-1]}" if gpus else "GPUs"
            label = (
                f"{pool['name']} replica {index}<br/>{pool['model']} {pool['quant']} "
                f"TP{pool['tp']}<br/>{span}"
            )
            nodes.setdefault(int(placed.get("node", 0)), []).append(f'    {rid}["{label}"]')
            lines.append(f"  gw -->|{serves}| {rid}")
    for node, members in sorted(nodes.items()):
        lines += [
            f'  subgraph node{node}["node {node}: NVMe weight cache (verified)"]',
            *members,
            "  end",
        ]
    lines += [
        '  prom["Prometheus + Alertmanager"] -.scrape.-> gw',
        *[f"  prom -.scrape.-> node{node}" for node in sorted(nodes)],
    ]
    return lines
