"""A live simulated stack with its observability, for the tests that query real data.

`live_stack` starts the stack's simulated engines (each with its fault port) and the gateway,
every process's output in its own log file (what a log shipper would collect from the
containers). `observed` adds the DCGM-compatible exporter (GPUs held by the replicas, load from
their engines), Debian's node_exporter and a real Prometheus scraping them all every second with
the rendered rules loaded. Everything binds 127.0.0.1 on ports the OS hands out, and stops at
the end of the `with`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from inhouse.launch.plan import gateway_process, plan_stack
from inhouse.launch.tether import popen
from inhouse.render import render_stack
from inhouse.render.layout import engine_units
from inhouse.render.prometheus_config import (
    Receiver,
    alertmanager_config,
    local_scrape_jobs,
    prometheus_config,
)
from inhouse.render.yamltext import dump_yaml
from inhouse.spec.catalog import get_gpu
from inhouse.spec.stack import StackSpec, dump_stack

DEMO_KEY = "sk-live-query-test-key-0123456789"
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LiveStack:
    stack: StackSpec
    namespace: str
    workdir: Path
    engine_urls: dict[str, list[str]]
    admin_urls: list[str]
    gateway_url: str
    logs: dict[str, Path] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    metrics_port: int = 0

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self.workdir / f"{name}.log"
        self.logs[name] = log
        with log.open("wb") as out:
            process = popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.processes.append(process)

    @property
    def gateway_metrics_url(self) -> str:
        """Where the gateway serves /metrics: its metrics port, not its API port."""
        return f"http://127.0.0.1:{self.metrics_port}"

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs.values())


def wait_http(url: str, timeout_s: float = 60.0, processes: list[Any] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in processes or []:
            if process.poll() is not None:
                raise AssertionError(f"{process.args[:4]} exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer 200 within {timeout_s} s")


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        if process.poll() is None:
            process.terminate()
    for process in reversed(processes):
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def live_stack(
    stack: StackSpec, workdir: Path, namespace: str, log_prompts: bool = False
) -> Iterator[LiveStack]:
    """The stack's engines (simulated) and gateway, ready."""
    workdir.mkdir(parents=True, exist_ok=True)
    plan = plan_stack(stack, free_port())
    live = LiveStack(stack, namespace, workdir, {}, [], "")
    try:
        for spec in plan.processes:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [*spec.argv, "--port", str(port), "--admin-port", str(admin := free_port())]
            if log_prompts:
                argv.append("--log-prompts")
            live.engine_urls.setdefault(spec.name.rsplit("-", 1)[0], []).append(url)
            live.admin_urls.append(f"http://127.0.0.1:{admin}")
            live.start(spec.name, argv)
        for urls in live.engine_urls.values():
            for url in urls:
                wait_http(f"{url}/health", processes=live.processes)
        stack_file = workdir / "stack.yaml"
        stack_file.write_text(dump_stack(stack))
        endpoints = workdir / "endpoints.json"
        endpoints.write_text(json.dumps({"pools": live.engine_urls}))
        port = free_port()
        live.metrics_port = free_port()
        gateway = gateway_process(
            stack_file, endpoints, port, "127.0.0.1", DEMO_KEY, live.metrics_port
        )
        assert gateway is not None, "inhouse gateway is missing"
        live.gateway_url = gateway.url
        argv = [*gateway.argv, *(["--log-prompts"] if log_prompts else [])]
        live.start("gateway", argv)
        wait_http(f"{live.gateway_url}/health", processes=live.processes)
        yield live
    finally:
        _stop(live.processes)


@dataclass
class Observed:
    prometheus_url: str
    dcgm_url: str
    dcgm_admin_url: str
    notifications: list[tuple[str, dict[str, Any]]]  # (receiver path, Alertmanager's body)


@contextlib.contextmanager
def webhook() -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A local receiver for Alertmanager's webhooks: (base URL, what arrived, by path)."""
    received: list[tuple[str, dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            received.append((self.path, json.loads(body)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def _start_alertmanager(extra: LiveStack, base_url: str) -> str:
    """Alertmanager with the rendered routes, its receivers pointed at the local webhook."""
    config = alertmanager_config(Receiver("page", f"{base_url}/page"),
                                 Receiver("ticket", f"{base_url}/ticket"))  # fmt: skip
    (extra.workdir / "alertmanager.yml").write_text(dump_yaml(config))
    port = free_port()
    extra.start(
        "alertmanager",
        [
            str(ALERTMANAGER),
            f"--config.file={extra.workdir / 'alertmanager.yml'}",
            f"--storage.path={extra.workdir / 'alertmanager'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip port: one Alertmanager
            "--log.level=warn",
        ],
    )
    wait_http(f"http://127.0.0.1:{port}/-/ready", processes=extra.processes)
    return f"127.0.0.1:{port}"


@contextlib.contextmanager
def observed(live: LiveStack) -> Iterator[Observed]:
    """dcgm-exporter (simulated), node_exporter, Alertmanager (the rendered routes, a local
    webhook) and Prometheus (1 s scrapes, the rendered rules)."""
    assert PROMETHEUS and NODE_EXPORTER and ALERTMANAGER, "Debian's Prometheus packages"
    processes: list[subprocess.Popen[bytes]] = []
    extra = LiveStack(live.stack, live.namespace, live.workdir, {}, [], "", live.logs, processes)
    with webhook() as (hook_url, notifications):
        yield from _observed(live, extra, hook_url, notifications)


def _observed(
    live: LiveStack,
    extra: LiveStack,
    hook_url: str,
    notifications: list[tuple[str, dict[str, Any]]],
) -> Iterator[Observed]:
    processes = extra.processes
    try:
        alertmanager = _start_alertmanager(extra, hook_url)
        dcgm_port, dcgm_admin = free_port(), free_port()
        units = engine_units(live.stack)
        gpu = get_gpu(units[0].pool.gpu)
        argv = [sys.executable, "-m", "inhouse.cli.main", "dcgm-exporter", "--gpu", gpu.name]
        argv += ["--num-gpus", "8", "--hostname", "gpu-node-1", "--namespace", live.namespace]
        argv += ["--port", str(dcgm_port), "--admin-port", str(dcgm_admin)]
        urls = [u for pool in live.engine_urls.values() for u in pool]
        for unit, url in zip(units, urls, strict=True):
            gpus = ",".join(str(g) for g in unit.gpu_ids)
            argv += ["--replica", f"{unit.name}={gpus}@{url}"]
        extra.start("dcgm-exporter", argv)
        node_port = free_port()
        extra.start("node-exporter", [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}"])
        files = render_stack(live.stack).files
        (live.workdir / "rules.yaml").write_text(files["prometheus/rules.yaml"])
        jobs = local_scrape_jobs(
            live.stack,
            live.namespace,
            live.engine_urls,
            gateway=live.gateway_metrics_url,
            dcgm=f"http://127.0.0.1:{dcgm_port}",
            node=f"http://127.0.0.1:{node_port}",
        )
        config = prometheus_config(
            jobs,
            rule_files=["rules.yaml"],
            alertmanagers=[alertmanager],
            scrape_interval="1s",
            evaluation_interval="1s",
        )
        (live.workdir / "prometheus.yml").write_text(dump_yaml(config))
        prom_port = free_port()
        extra.start(
            "prometheus",
            [
                PROMETHEUS,
                f"--config.file={live.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={live.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ],
        )
        prometheus_url = f"http://127.0.0.1:{prom_port}"
        wait_http(f"{prometheus_url}/-/ready", processes=processes)
        wait_http(f"http://127.0.0.1:{dcgm_port}/health", processes=processes)
        dcgm = f"http://127.0.0.1:{dcgm_port}"
        yield Observed(prometheus_url, dcgm, f"http://127.0.0.1:{dcgm_admin}", notifications)
    finally:
        _stop(processes)
