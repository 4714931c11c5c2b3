"""The webhook receiver Alertmanager notifies: it records each notification and when it came.

An alert counts as fired in a drill only when a notification saying so reached this receiver,
through the real Alertmanager, from the real Prometheus. Alertmanager posts its webhook JSON
(`{"receiver", "status", "alerts": [{"status", "labels", "annotations", "startsAt",
"endsAt"}], ...}`) to `/page` or `/ticket`; each alert in it becomes one `Notified`.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Notified:
    """One alert in one notification: `at` is `time.perf_counter()` when it arrived;
    `starts_at` the alert's `startsAt` (when Prometheus fired it), Unix seconds, None when the
    notification did not say."""

    at: float
    receiver: str
    status: str  # firing | resolved
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float | None = None

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    def matches(self, name: str, labels: Mapping[str, str] | None = None) -> bool:
        if self.name != name:
            return False
        return all(self.labels.get(k) == v for k, v in (labels or {}).items())


class Receiver:
    """A threaded HTTP server on 127.0.0.1 (an ephemeral port) that keeps every notification."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._seen: list[Notified] = []
        self.num_bad = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(min(size, MAX_BODY_BYTES))
                ok = receiver.record(self.path.strip("/"), raw)
                self.send_response(200 if ok else 400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return  # the drill's evidence is the record, not an access log

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def record(self, receiver: str, raw: bytes) -> bool:
        try:
            body = json.loads(raw)
            alerts = body["alerts"]
        except (ValueError, KeyError, TypeError):
            with self._lock:
                self.num_bad += 1
            return False
        now = time.perf_counter()
        items = [
            Notified(
                now,
                receiver,
                str(a.get("status", "")),
                dict(a.get("labels") or {}),
                dict(a.get("annotations") or {}),
                _unix_s(a.get("startsAt")),
            )
            for a in alerts
            if isinstance(a, dict)
        ]
        with self._lock:
            self._seen.extend(items)
            self._lock.notify_all()
        return True

    def notifications(self, since: float = 0.0) -> list[Notified]:
        with self._lock:
            return [n for n in self._seen if n.at >= since]

    def wait_for(
        self, predicate: Callable[[Notified], bool], timeout_s: float, since: float = 0.0
    ) -> Notified | None:
        """The first notification since `since` that satisfies `predicate`, waiting up to
        `timeout_s` for it; None if none came."""
        deadline = time.perf_counter() + timeout_s
        with self._lock:
            while True:
                for item in self._seen:
                    if item.at >= since and predicate(item):
                        return item
                left = deadline - time.perf_counter()
                if left <= 0:
                    return None
                self._lock.wait(left)


def _unix_s(text: object) -> float | None:
    """An RFC 3339 time (Alertmanager's `startsAt`) in Unix seconds; None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
