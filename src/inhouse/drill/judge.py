"""The judge: a real Prometheus and a real Alertmanager, started for the drill, and the receiver.

Prometheus (Debian `prometheus`) scrapes the stack each second with the stack's rendered rules,
`for:` holds and range windows scaled by `--time-scale`; Alertmanager (Debian
`prometheus-alertmanager`) routes `page` and `ticket` to the drill's `Receiver`. Both run as
child processes in their own sessions, with their data and logs in the drill's work directory,
on ephemeral ports of 127.0.0.1, and are stopped with the drill (tethered to it: a drill
killed outright takes them along, `launch.tether`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from inhouse.drill.promconfig import drill_alertmanager_config, drill_prometheus_config
from inhouse.drill.receiver import Receiver
from inhouse.errors import InhouseError
from inhouse.launch.tether import popen

PROMETHEUS_NAMES = ("prometheus",)
ALERTMANAGER_NAMES = ("prometheus-alertmanager", "alertmanager")
START_TIMEOUT_S = 30.0


class JudgeError(InhouseError):
    """Prometheus or Alertmanager is missing or did not start."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def find_binary(names: Sequence[str], package: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise JudgeError(
        f"{names[0]} is not installed: the drill's judge is a real {package}. Install the "
        f"Debian package (`apt-get install {package}`; listed in .ci/apt-packages.txt)"
    )


@dataclass
class _Proc:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    log: Path


def _start(name: str, argv: list[str], url: str, ready_path: str, log: Path) -> _Proc:
    with log.open("ab") as handle:
        process = popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    proc = _Proc(name, process, url, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise JudgeError(f"{name} exited with code {process.returncode}:\n{tail}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + ready_path, timeout=1.0).status_code == 200:
                return proc
        time.sleep(0.2)
    _stop(proc)
    raise JudgeError(f"{name} not ready after {START_TIMEOUT_S:g} s; see {log}")


def _stop(proc: _Proc) -> None:
    if proc.process.poll() is None:
        proc.process.send_signal(signal.SIGTERM)
        try:
            proc.process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.process.pid, signal.SIGKILL)
            proc.process.wait()


class Judge:
    """Prometheus + Alertmanager + receiver for one drill session."""

    def __init__(self, work_dir: Path, rules_text: str, jobs: Sequence[Mapping[str, Any]]) -> None:
        # NOTE: absolute: Prometheus reads `rule_files` relative to its configuration file's
        # directory, so a relative path (`--out drills/`, the default) loaded no rules at all.
        self.work_dir = work_dir.absolute()
        self.rules_text = rules_text
        self.jobs = list(jobs)
        self.receiver = Receiver()
        self.prometheus: _Proc | None = None
        self.alertmanager: _Proc | None = None
        self.version = ""
        self.rules_path = self.work_dir / "rules.yaml"

    def start(self) -> Judge:
        prom_bin = find_binary(PROMETHEUS_NAMES, "prometheus")
        am_bin = find_binary(ALERTMANAGER_NAMES, "prometheus-alertmanager")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.receiver.start()
        am_port, prom_port = free_port(), free_port()
        am_conf = self.work_dir / "alertmanager.yml"
        am_conf.write_text(drill_alertmanager_config(self.receiver.url), encoding="utf-8")
        am_argv = [
            am_bin,
            f"--config.file={am_conf}",
            f"--storage.path={self.work_dir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        ]
        self.alertmanager = _start(
            "alertmanager",
            am_argv,
            f"http://127.0.0.1:{am_port}",
            "/-/ready",
            self.work_dir / "alertmanager.log",
        )
        self.rules_path.write_text(self.rules_text, encoding="utf-8")
        prom_conf = self.work_dir / "prometheus.yml"
        prom_conf.write_text(
            drill_prometheus_config(self.jobs, str(self.rules_path), f"127.0.0.1:{am_port}"),
            encoding="utf-8",
        )
        prom_argv = [
            prom_bin,
            f"--config.file={prom_conf}",
            f"--storage.tsdb.path={self.work_dir / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
        ]
        self.prometheus = _start(
            "prometheus",
            prom_argv,
            f"http://127.0.0.1:{prom_port}",
            "/-/ready",
            self.work_dir / "prometheus.log",
        )
        info = httpx.get(f"{self.prometheus.url}/api/v1/status/buildinfo", timeout=5).json()
        self.version = str(info.get("data", {}).get("version", ""))
        self._check_rules_loaded()
        return self

    def _check_rules_loaded(self) -> None:
        assert self.prometheus is not None
        groups = self.api("/api/v1/rules")["groups"]
        if self.rules_text.strip() and not groups:
            raise JudgeError(f"Prometheus loaded no rule groups from {self.rules_path}")

    def stop(self) -> None:
        for proc in (self.prometheus, self.alertmanager):
            if proc is not None:
                _stop(proc)
        self.receiver.stop()

    @property
    def prometheus_url(self) -> str:
        assert self.prometheus is not None, "start() first"
        return self.prometheus.url

    def api(self, path: str, params: dict[str, Any] | None = None) -> Any:
        response = httpx.get(self.prometheus_url + path, params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise JudgeError(f"Prometheus {path} {params}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result vector (`[{"metric": {...}, "value": [t, "v"]}]`)."""
        data = self.api("/api/v1/query", {"query": expr})
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_value(self, expr: str) -> float | None:
        """The single value of a query that yields one series (sum it first), or None."""
        result = self.query(expr)
        if not result:
            return None
        return float(result[0]["value"][1])

    def query_range(self, expr: str, start: float, end: float, step_s: float = 1.0) -> Any:
        params = {"query": expr, "start": start, "end": end, "step": step_s}
        return self.api("/api/v1/query_range", params)["result"]

    def require_scraped(self, timeout_s: float = 20.0) -> None:
        """Every target scraped up once, or a `JudgeError` naming those that were not: a drill
        judged without them would blame the rules for what the judge never saw."""
        down = self.wait_scraped(timeout_s)
        if down:
            assert self.prometheus is not None
            raise JudgeError(
                f"Prometheus could not scrape {'; '.join(down)} within {timeout_s:g} s; see "
                f"{self.prometheus.log}"
            )

    def wait_scraped(self, timeout_s: float = 20.0) -> list[str]:
        """Wait until every target has been scraped up once; returns the jobs still down."""
        deadline = time.monotonic() + timeout_s
        down: list[str] = []
        while time.monotonic() < deadline:
            active = self.api("/api/v1/targets")["activeTargets"]
            down = [
                f"{t['labels'].get('job')} {t['scrapeUrl']}"
                for t in active
                if t.get("health") != "up"
            ]
            if active and not down:
                return []
            if not active:  # NOTE: none discovered yet is not "every one scraped"
                down = ["no scrape target discovered"]
            time.sleep(0.5)
        return down
