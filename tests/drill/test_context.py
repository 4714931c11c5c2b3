"""Which notifications a drill counts as its alert: firing, of an alert that fired after the
drill's start or its fault, not one an earlier drill left behind however late it arrives."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from inhouse.drill.context import DrillContext
from inhouse.drill.evidence import DrillResult
from inhouse.drill.receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()


def _iso(unix_s: float) -> str:
    return dt.datetime.fromtimestamp(unix_s, dt.UTC).isoformat().replace("+00:00", "Z")


def _notify(receiver: Receiver, status: str, starts_at: float, pod: str = "chat-1") -> None:
    alert = {"status": status, "labels": {"alertname": "InhouseEngineReplicaDown", "pod": pod},
             "annotations": {}, "startsAt": _iso(starts_at)}  # fmt: skip
    body = {"version": "4", "receiver": "page", "status": status, "alerts": [alert]}
    assert receiver.record("page", json.dumps(body).encode())


def _context(receiver: Receiver, tmp_path: Path) -> DrillContext:
    judge = SimpleNamespace(receiver=receiver)
    result = DrillResult("kill-replica", "now", "test")
    return DrillContext(result, None, judge, None, tmp_path, True)  # type: ignore[arg-type]


def _wait(ctx: DrillContext, since: float | None = None) -> float | None:
    labels = {"pod": "chat-1"}
    got = asyncio.run(ctx.wait_alert("InhouseEngineReplicaDown", labels, 0.2, since=since))
    return None if got is None else got.starts_at


def test_the_receiver_keeps_when_the_alert_started(receiver: Receiver) -> None:
    _notify(receiver, "firing", 1_796_000_000.25)
    (got,) = receiver.notifications()
    assert got.starts_at == 1_796_000_000.25


def test_an_alert_an_earlier_drill_left_behind_is_not_this_drills(
    receiver: Receiver, tmp_path: Path
) -> None:
    # The drill before left the replica down; its alert fired 5 s before this drill started
    # and its notification arrived only now, after this drill's start: not this drill's page.
    ctx = _context(receiver, tmp_path)
    _notify(receiver, "firing", ctx.t0_wall - 5.0)
    assert _wait(ctx) is None
    began = ctx.t0_wall + 2.0
    _notify(receiver, "firing", began)
    assert _wait(ctx) == pytest.approx(began, abs=1e-5)


def test_an_alert_from_before_the_fault_is_not_the_faults(
    receiver: Receiver, tmp_path: Path
) -> None:
    ctx = _context(receiver, tmp_path)
    _notify(receiver, "firing", ctx.t0_wall + 1.0)  # fired, then the fault 4 s in
    fault = ctx.t0 + 4.0
    assert _wait(ctx, since=fault) is None
    time.sleep(0.01)
    _notify(receiver, "resolved", ctx.t0_wall + 6.0)  # a resolution is never a firing
    assert _wait(ctx, since=fault) is None


def test_a_page_is_an_alert_alertmanager_routed_as_a_page(
    receiver: Receiver, tmp_path: Path
) -> None:
    # "KV page" and "replica-down page" passed for any notification of the alert: one a
    # rules change made a ticket (routed to /ticket) passed as the page the drill asks for.
    ctx = _context(receiver, tmp_path)
    labels = {"alertname": "InhouseKVCacheFull", "severity": "ticket"}
    body = {"alerts": [{"status": "firing", "labels": labels, "startsAt": _iso(ctx.t0_wall)}]}
    assert receiver.record("ticket", json.dumps(body).encode())
    (ticket,) = receiver.notifications()
    assert ctx.check_page("KV page", "InhouseKVCacheFull", ticket) is False
    page = dataclasses.replace(ticket, receiver="page", labels={**labels, "severity": "page"})
    assert ctx.check_page("KV page", "InhouseKVCacheFull", page) is True
    assert ctx.check_page("KV page", "InhouseKVCacheFull", None) is False
    assert [c.ok for c in ctx.result.checks] == [False, True, False]
