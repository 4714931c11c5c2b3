"""The drill's Prometheus and Alertmanager configuration, in one place.

Prometheus scrapes every target each second and evaluates the stack's rules each second; its
jobs carry the labels the rendered rules select on (`namespace`, `job` = `<pool>-engine` or
`gateway`, `pod` = the replica's name), as the ServiceMonitors of `inhouse render` give them in
a cluster. Alertmanager routes `severity: page` and `severity: ticket` to two webhook receivers
(the drill's recorder), grouping by alert name and the labels that tell one replica or GPU from
another, and sends resolutions too. Group wait and interval are 1 s: a drill measures when an
alert reached Alertmanager's receiver, and a 30 s group wait would only add 30 s to each.

NOTE: issue 18 renders the production Prometheus and Alertmanager configuration (scrape jobs,
page and ticket routes). When it lands, build these from its renderers and keep only the
drill's overrides here (1 s intervals, static targets on this machine, the webhook URLs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inhouse.render.yamltext import dump_yaml

SCRAPE_INTERVAL = "1s"
GROUP_BY = ["alertname", "namespace", "pool", "pod", "gpu", "Hostname", "model_name"]


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One scrape target: `address` is `host:port`; `labels` are added to every series."""

    job: str
    address: str
    labels: dict[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


def prometheus_config(targets: Sequence[ScrapeTarget], rules_file: str, alertmanager: str) -> str:
    jobs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for target in targets:
        group = {"targets": [target.address], "labels": dict(target.labels)}
        jobs.setdefault((target.job, target.metrics_path), []).append(group)
    scrape_configs = [
        {
            "job_name": job,
            "metrics_path": path,
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "static_configs": groups,
        }
        for (job, path), groups in jobs.items()
    ]
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [rules_file],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": scrape_configs,
    }
    return "# Written by `inhouse drill`: the drill's own Prometheus.\n" + dump_yaml(config)


def alertmanager_config(receiver_url: str) -> str:
    """`page` and `ticket` routes to the drill's receiver at `receiver_url`/page and /ticket."""

    def receiver(name: str) -> dict[str, Any]:
        hook = {"url": f"{receiver_url}/{name}", "send_resolved": True, "max_alerts": 0}
        return {"name": name, "webhook_configs": [hook]}

    config = {
        "route": {
            "receiver": "ticket",
            "group_by": GROUP_BY,
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
            "routes": [
                {"matchers": ['severity="page"'], "receiver": "page"},
                {"matchers": ['severity="ticket"'], "receiver": "ticket"},
            ],
        },
        "receivers": [receiver("page"), receiver("ticket")],
    }
    return "# Written by `inhouse drill`: page and ticket to the drill's receiver.\n" + dump_yaml(
        config
    )
