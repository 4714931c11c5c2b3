"""The drill's Prometheus and Alertmanager configuration: issue 18's renderers
(`inhouse.render.prometheus_config`), with the drill's overrides.

The jobs are `local_scrape_jobs`: the stack's processes on this machine with the labels a
Kubernetes scrape gives them (`namespace`, `job` = `<pool>-engine` or `gateway`, `pod` =
`<pool>-<i>`), so the rendered rules read them unchanged. The overrides, and why:

* every target scraped and every rule evaluated each second (a drill lasts seconds, not hours);
* Alertmanager's group wait and group interval 1 s: a drill measures when an alert reached the
  receiver, and the production 10-30 s wait and 5-minute interval would only add that much to
  each firing and each resolution; grouped by the labels that tell one replica or GPU from
  another, so each fault is its own notification;
* `page` and `ticket` go to the drill's receiver (`/page`, `/ticket`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from inhouse.render.prometheus_config import (
    Receiver,
    alertmanager_config,
    local_scrape_jobs,
    prometheus_config,
)
from inhouse.render.yamltext import dump_yaml
from inhouse.spec.stack import StackSpec

INTERVAL = "1s"
GROUP_BY = ("alertname", "namespace", "pool", "pod", "gpu", "Hostname", "model_name")


def drill_jobs(
    stack: StackSpec,
    namespace: str,
    pool_urls: Mapping[str, Sequence[str]],
    gateway_metrics_url: str,
    dcgm_url: str,
) -> list[dict[str, Any]]:
    return local_scrape_jobs(
        stack, namespace, pool_urls, gateway=gateway_metrics_url, dcgm=dcgm_url,
        interval=INTERVAL,
    )  # fmt: skip


def drill_prometheus_config(
    jobs: Sequence[Mapping[str, Any]], rules_file: str, alertmanager: str
) -> str:
    config = prometheus_config(
        jobs, rule_files=[rules_file], alertmanagers=[alertmanager],
        scrape_interval=INTERVAL, evaluation_interval=INTERVAL,
    )  # fmt: skip
    return "# Written by `inhouse drill`: the drill's own Prometheus.\n" + dump_yaml(config)


def drill_alertmanager_config(receiver_url: str) -> str:
    config = alertmanager_config(
        Receiver("page", f"{receiver_url}/page"), Receiver("ticket", f"{receiver_url}/ticket"),
        group_by=GROUP_BY, group_wait=INTERVAL, page_group_wait=INTERVAL,
    )  # fmt: skip
    config["route"]["group_interval"] = INTERVAL
    for route in config["route"]["routes"]:
        route["group_interval"] = INTERVAL
    return "# Written by `inhouse drill`: page and ticket to the drill's receiver.\n" + dump_yaml(
        config
    )
