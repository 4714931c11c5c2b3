"""The judge end to end: a real Prometheus scrapes a target, evaluates a rule, a real
Alertmanager routes the alert to the receiver by severity, and the resolution follows."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.drill.conftest import needs_judge

from inhouse.drill.judge import Judge, JudgeError, find_binary
from inhouse.drill.receiver import Receiver
from inhouse.render.prometheus_config import static_job

RULES = """groups:
- name: test
  rules:
  - alert: DrillTestHigh
    expr: drill_test_value > 1
    for: 1s
    labels: {severity: page}
    annotations: {summary: "value {{ $value }} on {{ $labels.pod }}"}
  - alert: DrillTestTicket
    expr: drill_test_value > 5
    labels: {severity: ticket}
"""


class _Target:
    """A /metrics endpoint whose one gauge the test sets."""

    def __init__(self) -> None:
        self.value = 0.0
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"drill_test_value {target.value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


@needs_judge
def test_alert_reaches_receiver_by_severity_then_resolves(tmp_path: Path) -> None:
    target = _Target()
    judge = Judge(
        tmp_path, RULES, [static_job("t", [(target.address, {"pod": "p-1"})], interval="1s")]
    ).start()
    try:
        assert judge.version.startswith("2.")
        assert judge.wait_scraped() == []
        t0 = time.perf_counter()
        target.value = 2.0
        fired = judge.receiver.wait_for(
            lambda n: n.status == "firing" and n.name == "DrillTestHigh", 30, t0
        )
        assert fired is not None and fired.receiver == "page"
        assert fired.labels["pod"] == "p-1" and fired.annotations["summary"] == "value 2 on p-1"
        target.value = 0.0
        resolved = judge.receiver.wait_for(
            lambda n: n.status == "resolved" and n.name == "DrillTestHigh", 30, fired.at
        )
        assert resolved is not None
        names = {n.name for n in judge.receiver.notifications()}
        assert "DrillTestTicket" not in names  # never above 5
        assert judge.query_value("drill_test_value") == 0.0
    finally:
        judge.stop()
        target.server.shutdown()
        target.server.server_close()


def test_receiver_keeps_each_alert_and_refuses_garbage() -> None:
    receiver = Receiver().start()
    try:
        body = {"alerts": [{"status": "firing", "labels": {"alertname": "A", "gpu": "3"}}]}
        request = urllib.request.Request(
            f"{receiver.url}/page", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request) as response:
            assert response.status == 200
        got = receiver.wait_for(lambda n: n.matches("A", {"gpu": "3"}), 5)
        assert got is not None and got.receiver == "page"
        bad = urllib.request.Request(f"{receiver.url}/page", data=b"{nope", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad)
        refused.value.close()
        assert receiver.num_bad == 1
        assert receiver.wait_for(lambda n: n.name == "B", 0.2) is None
    finally:
        receiver.stop()


def test_missing_binary_says_which_package() -> None:
    with pytest.raises(JudgeError, match="apt-get install no-such-pkg"):
        find_binary(("no-such-binary-xyz",), "no-such-pkg")


@needs_judge
def test_a_relative_work_directory_still_loads_the_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `inhouse drill run NAME` writes to `drills/` by default: a path relative to the current
    # directory, which Prometheus read relative to its configuration file's directory instead.
    monkeypatch.chdir(tmp_path)
    judge = Judge(Path("drills/_run/judge"), RULES, []).start()
    try:
        names = [r["name"] for g in judge.api("/api/v1/rules")["groups"] for r in g["rules"]]
        assert names == ["DrillTestHigh", "DrillTestTicket"]
    finally:
        judge.stop()


@pytest.mark.parametrize(
    "body",
    [
        b'{"alerts": [{"status": "firing", "labels": [1, 2]}]}',  # was a handler traceback
        b'{"alerts": [{"status": "firing", "labels": {"alertname": 5}}]}',  # kept as an int
        b'{"alerts": "firing"}',  # was 200, nothing kept
        b'{"alerts": [{"status": "pending", "labels": {"alertname": "A"}}]}',
        b'{"alerts": [{"status": "firing", "labels": {"alertname": "A"}}, 3]}',
    ],
)
def test_a_body_not_of_alertmanagers_shape_is_refused_whole(body: bytes) -> None:
    receiver = Receiver().start()
    try:
        request = urllib.request.Request(f"{receiver.url}/page", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 400
        refused.value.close()
        assert receiver.notifications() == [] and receiver.num_bad == 1
    finally:
        receiver.stop()


@pytest.mark.parametrize("length", ["-5", "x"])
def test_a_bad_content_length_is_answered_400_not_read_until_eof(length: str) -> None:
    # "-5" read the body until the client closed (the client waited forever); "x" was a
    # handler traceback and no answer
    receiver = Receiver().start()
    try:
        host, port = receiver.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(f"POST /page HTTP/1.1\r\nContent-Length: {length}\r\n\r\n{{}}".encode())
            assert sock.recv(64).startswith(b"HTTP/1.0 400")
        assert receiver.num_bad == 1
    finally:
        receiver.stop()


@needs_judge
def test_a_target_prometheus_cannot_scrape_stops_the_session(tmp_path: Path) -> None:
    # The runner waited for every target and ignored the answer: the drills ran on, and an
    # exporter the judge never scraped read as an alert that did not fire.
    target = _Target()
    jobs = [
        static_job("t", [(target.address, {"pod": "p-1"})], interval="1s"),
        static_job("gone", [("127.0.0.1:9", {"pod": "p-2"})], interval="1s"),
    ]
    judge = Judge(tmp_path, RULES, jobs).start()
    try:
        with pytest.raises(JudgeError, match=r"could not scrape gone http://127\.0\.0\.1:9/"):
            judge.require_scraped(15.0)
    finally:
        judge.stop()
        target.server.shutdown()
        target.server.server_close()
