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
from typing import Any, TypeGuard

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
                length = self.headers.get("Content-Length") or ""
                size = int(length) if length.isdigit() else -1  # "-1", "x": refused, not read
                raw = self.rfile.read(min(size, MAX_BODY_BYTES)) if size >= 0 else b""
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
        """Keep each alert of one webhook body; a body not of Alertmanager's shape (`alerts` a
        list of objects whose `status` is firing or resolved and whose labels and annotations
        map strings to strings) is refused whole, kept nowhere, and counted in `num_bad`."""
        now = time.perf_counter()
        try:
            alerts = json.loads(raw)["alerts"]
            items = (
                [_notified(now, receiver, a) for a in alerts] if isinstance(alerts, list) else []
            )
        except (ValueError, KeyError, TypeError):
            items = []
        if not items or None in items:
            with self._lock:
                self.num_bad += 1
            return False
        with self._lock:
            self._seen.extend(n for n in items if n is not None)
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


def _notified(at: float, receiver: str, alert: object) -> Notified | None:
    """One alert of a webhook body, or None if it is not of Alertmanager's shape."""
    if not isinstance(alert, dict) or alert.get("status") not in ("firing", "resolved"):
        return None
    labels, annotations = alert.get("labels"), alert.get("annotations") or {}
    if not (_is_str_map(labels) and _is_str_map(annotations)):
        return None
    return Notified(
        at,
        receiver,
        alert["status"],
        dict(labels),
        dict(annotations),
        _unix_s(alert.get("startsAt")),
    )


def _is_str_map(value: object) -> TypeGuard[dict[str, str]]:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )
