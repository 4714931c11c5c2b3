"""Prometheus and Alertmanager configuration as plain data, for any set of targets.

Building blocks others call with their own targets (the drills point them at the processes of a
local stack; `render` at Kubernetes service discovery):

* `static_job(name, targets)` — a scrape job over fixed `host:port` targets, each with the labels
  a Kubernetes scrape would have given it (`namespace`, `pod`, `pool`, ...), so the same rules
  and dashboards read a local stack and a cluster alike;
* `dns_job(name, dns_name, port, labels)` — a job over a headless Service's A records (one per
  ready pod);
* `prometheus_config(jobs, rule_files, alertmanagers)` — the whole `prometheus.yml`;
* `alertmanager_config(page, ticket)` — routes `severity="page"` and `severity="ticket"` to their
  receivers (webhooks), everything else to the ticket receiver.

`stack_scrape_jobs` and `local_scrape_jobs` say which jobs a stack has: engines (one job per
pool, `<pool>-engine`, the name the alerts select), the gateway, dcgm-exporter and
node_exporter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inhouse.metric_names import replica_label
from inhouse.render import layout
from inhouse.render.options import RenderOptions
from inhouse.render.yamltext import dump_yaml
from inhouse.spec.stack import StackSpec

SCRAPE_INTERVAL = "15s"  # the replica-down alert (30 s) needs two misses
EVALUATION_INTERVAL = "30s"
# Alertmanager: a page repeats hourly while it fires; a ticket twice a day.
PAGE_REPEAT = "1h"
TICKET_REPEAT = "12h"


@dataclass(frozen=True, slots=True)
class Receiver:
    """Where Alertmanager sends a notification: a webhook (a pager bridge, a ticket system, a
    drill's judge)."""

    name: str
    webhook_url: str
    send_resolved: bool = True


def static_job(
    name: str,
    targets: Sequence[tuple[str, Mapping[str, str]]],
    *,
    interval: str | None = None,
    metrics_path: str = "/metrics",
    honor_labels: bool = False,
) -> dict[str, Any]:
    """A job over fixed targets: (`host:port`, labels) pairs, one static group each."""
    job: dict[str, Any] = {"job_name": name}
    if interval:
        job["scrape_interval"] = interval
    job["metrics_path"] = metrics_path
    if honor_labels:
        job["honor_labels"] = True
    job["static_configs"] = [
        {"targets": [address], **({"labels": dict(labels)} if labels else {})}
        for address, labels in targets
    ]
    return job


def dns_job(
    name: str,
    dns_name: str,
    port: int,
    labels: Mapping[str, str],
    *,
    interval: str | None = None,
    honor_labels: bool = False,
) -> dict[str, Any]:
    """A job over the A records of a name: a headless Service lists one per ready pod, so each
    pod is scraped on its own (no load-balanced VIP), with `labels` added to every target.

    DNS, not the Kubernetes API: it works with every Prometheus build (Debian's has no
    Kubernetes discovery), needs no RBAC, and is what the pods' readiness already publishes.
    """
    job: dict[str, Any] = {"job_name": name}
    if interval:
        job["scrape_interval"] = interval
    if honor_labels:
        job["honor_labels"] = True
    job["dns_sd_configs"] = [{"names": [dns_name], "type": "A", "port": port}]
    job["relabel_configs"] = [
        {"target_label": key, "replacement": value} for key, value in labels.items()
    ]
    return job


def prometheus_config(
    jobs: Sequence[Mapping[str, Any]],
    *,
    rule_files: Sequence[str] = (),
    alertmanagers: Sequence[str] = (),
    scrape_interval: str = SCRAPE_INTERVAL,
    evaluation_interval: str = EVALUATION_INTERVAL,
    external_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`prometheus.yml`: global intervals, rule files, Alertmanagers (`host:port`), jobs."""
    global_: dict[str, Any] = {
        "scrape_interval": scrape_interval,
        "scrape_timeout": _timeout_for(scrape_interval),
        "evaluation_interval": evaluation_interval,
    }
    if external_labels:
        global_["external_labels"] = dict(external_labels)
    config: dict[str, Any] = {"global": global_}
    if rule_files:
        config["rule_files"] = list(rule_files)
    if alertmanagers:
        config["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]
        }
    config["scrape_configs"] = [dict(job) for job in jobs]
    return config


def _timeout_for(interval: str) -> str:
    """Scrape timeout: 10 s, or the interval when it is shorter (Prometheus refuses more)."""
    seconds = _seconds(interval)
    return interval if seconds < 10 else "10s"


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for suffix in ("ms", "s", "m", "h"):
        if duration.endswith(suffix) and duration[: -len(suffix)].replace(".", "").isdigit():
            return float(duration[: -len(suffix)]) * units[suffix]
    raise ValueError(f"duration {duration!r}: expected a number and one of ms, s, m, h")


def alertmanager_config(
    page: Receiver,
    ticket: Receiver,
    *,
    group_by: Sequence[str] = ("alertname", "namespace", "pool"),
    group_wait: str = "30s",
    page_group_wait: str = "10s",
) -> dict[str, Any]:
    """Routes: `severity="page"` to `page` (fast, hourly repeats), `severity="ticket"` and
    anything unlabelled to `ticket`."""
    receivers = [page] if page.name == ticket.name else [page, ticket]
    return {
        "route": {
            "receiver": ticket.name,
            "group_by": list(group_by),
            "group_wait": group_wait,
            "group_interval": "5m",
            "repeat_interval": TICKET_REPEAT,
            "routes": [
                {
                    "receiver": page.name,
                    "matchers": ['severity="page"'],
                    "group_wait": page_group_wait,
                    "repeat_interval": PAGE_REPEAT,
                },
                {"receiver": ticket.name, "matchers": ['severity="ticket"']},
            ],
        },
        "receivers": [
            {
                "name": r.name,
                "webhook_configs": [{"url": r.webhook_url, "send_resolved": r.send_resolved}],
            }
            for r in receivers
        ],
    }


def gateway_metrics_port(stack: StackSpec, options: RenderOptions) -> tuple[str, int]:
    """The gateway's metrics port (name, number): `gateway.metrics_port`, never the API port
    (its `/metrics` names tenants and their token counts)."""
    from inhouse.spec.gateway import parse_gateway

    del options
    return "metrics", parse_gateway(stack.gateway).metrics_port


DCGM_PORT = 9400
NODE_EXPORTER_PORT = 9100


def stack_scrape_jobs(
    stack: StackSpec, engines: layout.EngineLayout, namespace: str, options: RenderOptions
) -> list[dict[str, Any]]:
    """The stack's jobs in a cluster, by DNS (what the rendered ServiceMonitors say, for a
    Prometheus without the Operator): a static replica through its own Service (so its `pod`
    and `replica` labels are known), a scaled pool through its headless Service; the gateway
    and the exporters through the headless Services k8s/prometheus.yaml renders."""
    svc = f"{namespace}.svc.cluster.local"
    jobs: list[dict[str, Any]] = []
    for pool in engines.pools:
        units = engines.units_of(pool)
        job = f"{pool.name}-engine"
        if all(u.replica_index is not None for u in units):
            targets = [
                (
                    f"{u.name}.{svc}:{options.engine_port}",
                    replica_labels(pool.name, u.replica_index or 0, namespace),
                )
                for u in units
            ]
            jobs.append(static_job(job, targets))
        else:
            labels = {"namespace": namespace, "pool": pool.name, "service": job}
            jobs.append(dns_job(job, f"{job}.{svc}", options.engine_port, labels))
    _, port = gateway_metrics_port(stack, options)
    gateway_labels = {"namespace": namespace, "service": "gateway"}
    jobs.append(dns_job("gateway", f"{GATEWAY_SCRAPE_SERVICE}.{svc}", port, gateway_labels))
    monitoring = f"{options.monitoring_namespace}.svc.cluster.local"
    jobs.append(
        dns_job("dcgm-exporter", f"dcgm-exporter.{monitoring}", DCGM_PORT, {}, honor_labels=True)
    )
    jobs.append(dns_job("node-exporter", f"node-exporter.{monitoring}", NODE_EXPORTER_PORT, {}))
    return jobs


GATEWAY_SCRAPE_SERVICE = "gateway-scrape"


def replica_labels(pool: str, index: int, namespace: str) -> dict[str, str]:
    """The labels of a static replica's target, as the ServiceMonitor's relabelling gives."""
    return {
        "namespace": namespace,
        "pod": layout.replica_pod(pool, index),
        "pool": pool,
        "replica": replica_label(index),
        "service": f"{pool}-engine",
    }


def local_scrape_jobs(
    stack: StackSpec,
    namespace: str,
    pool_urls: Mapping[str, Sequence[str]],
    gateway: str | None = None,
    dcgm: str | None = None,
    node: str | None = None,
    interval: str | None = None,
) -> list[dict[str, Any]]:
    """The same jobs over a local stack's `host:port` addresses, with the labels a Kubernetes
    scrape gives: engines of pool P are job `P-engine`, pods `P-<i>` (the static layout's
    StatefulSet pods), so the rendered rules and dashboards read them unchanged."""
    jobs = []
    for pool in layout.engine_pools(stack):
        targets = [
            (_address(url), replica_labels(pool.name, index, namespace))
            for index, url in enumerate(pool_urls.get(pool.name, ()))
        ]
        jobs.append(static_job(f"{pool.name}-engine", targets, interval=interval))
    if gateway:
        labels = {"namespace": namespace, "pod": "gateway-0", "service": "gateway"}
        jobs.append(static_job("gateway", [(_address(gateway), labels)], interval=interval))
    if dcgm:
        jobs.append(
            static_job(
                "dcgm-exporter", [(_address(dcgm), {})], interval=interval, honor_labels=True
            )
        )
    if node:
        jobs.append(static_job("node-exporter", [(_address(node), {})], interval=interval))
    return jobs


def _address(url: str) -> str:
    """`http://host:port/...` -> `host:port`."""
    rest = url.split("://", 1)[-1]
    return rest.split("/", 1)[0]


def render_prometheus_config(
    stack: StackSpec, engines: layout.EngineLayout, namespace: str, options: RenderOptions
) -> dict[str, str]:
    """`prometheus/prometheus.yml` (Kubernetes discovery, the rendered rules, Alertmanager) and
    `alertmanager/alertmanager.yml` (page and ticket routes)."""
    prometheus = prometheus_config(
        stack_scrape_jobs(stack, engines, namespace, options),
        rule_files=["rules.yaml"],
        alertmanagers=[options.alertmanager_address],
        external_labels={"stack": stack.name},
    )
    alertmanager = alertmanager_config(
        Receiver("page", options.page_webhook_url), Receiver("ticket", options.ticket_webhook_url)
    )
    return {
        "prometheus/prometheus.yml": "# Rendered by `inhouse render` for a Prometheus without "
        "the Operator (the ServiceMonitors in k8s/ say the same).\n# Check: promtool check "
        "config prometheus.yml\n" + dump_yaml(prometheus),
        "alertmanager/alertmanager.yml": "# Rendered by `inhouse render`: severity=page to the "
        "pager, severity=ticket to the ticket system.\n# Check: amtool check-config "
        "alertmanager.yml\n" + dump_yaml(alertmanager),
    }
