"""The run journal (`requests.jsonl.partial`): rows on disk as the run goes, and a disk that
fails under it costs the journal, never the run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from inhouse.bench import records
from inhouse.bench.metrics import Outcome, RequestResult
from inhouse.bench.records import Journal, request_row


def result(index: int, gaps: int = 3, error: str = "") -> RequestResult:
    outcome = Outcome(index, 10.0 + index, t_send=10.001 + index, success=not error)
    outcome.error = error
    outcome.ttft_s, outcome.latency_s = 0.0123456, 0.5
    outcome.itl_s = [0.001 * (i + 1) + 0.0000004 for i in range(gaps)]
    return RequestResult(outcome, f"req-{index}", 16, 0, gaps + 1, "s1")


@pytest.mark.parametrize("gaps", [3, 40])  # one by one, and through numpy
def test_a_row_holds_the_request_in_ms_from_the_run_start(gaps: int) -> None:
    row = json.loads(request_row(result(2, gaps), 10.0))
    assert row["t_sched_s"] == 2.0 and row["t_send_s"] == 2.001
    assert row["ttft_ms"] == 12.346 and row["e2el_ms"] == 500.0
    assert row["itl_ms"] == [round(1.0 * (i + 1), 3) for i in range(gaps)]


def test_the_key_is_scrubbed_from_a_rows_strings() -> None:
    line = request_row(result(0, error="HTTP 401: bad key sk-secret-123"), 0.0, ("sk-secret-123",))
    assert b"sk-secret-123" not in line and json.loads(line)["error"].endswith("REDACTED")


def test_rows_reach_the_file_once_a_second_not_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [100.0]
    monkeypatch.setattr(records.time, "monotonic", lambda: now[0])
    journal = Journal.open(tmp_path / "out")
    partial = tmp_path / "out" / "requests.jsonl.partial"
    journal.add(result(0))
    journal.tick()
    assert partial.read_bytes() == b""  # within the second: buffered
    now[0] += records.FLUSH_INTERVAL_S
    journal.add(result(1))
    journal.tick()
    assert [json.loads(line)["request_id"] for line in partial.read_text().splitlines()] == [
        "req-0",
        "req-1",
    ]
    journal.close()


class FullDisk:
    """A file whose writes fail, as on a disk that has filled up."""

    closed = False

    def write(self, data: bytes) -> Any:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def test_a_disk_that_fails_under_the_journal_stops_the_journal_not_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A full disk mid-run raised out of the driver's loop and ended the run."""
    journal = Journal(FullDisk(), tmp_path / "requests.jsonl.partial", ())  # type: ignore[arg-type]
    for index in range(3):
        journal.add(result(index))
        journal.flush()
    journal.close()
    err = capsys.readouterr().err
    assert err.count("No space left on device") == 1
    assert "the run goes on" in err and str(tmp_path / "requests.jsonl.partial") in err


def test_rows_reach_the_disk_within_about_a_second_not_only_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows were flushed to the kernel and never fsynced: a power cut lost every row the
    kernel had not yet written out. They are now fsynced once a second at most (in the
    background), and once more at the end."""
    now = [100.0]
    synced: list[int] = []
    monkeypatch.setattr(records.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(os, "fsync", synced.append)
    journal = Journal.open(tmp_path / "out")
    for index in range(5):  # within the second: no sync for each row
        journal.add(result(index))
        journal.tick()
    assert synced == []
    now[0] += max(records.FLUSH_INTERVAL_S, getattr(records, "FSYNC_INTERVAL_S", 1.0))
    journal.add(result(5))
    journal.tick()  # flushed, then synced: not at close only
    deadline = time.perf_counter() + 2  # (time.monotonic is the test's clock)
    while not synced and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert synced == [journal.handle.fileno()]
    journal.add(result(6))
    journal.tick()  # flushed nothing new (within the second), synced nothing new
    assert len(synced) == 1
    journal.close()
    assert len(synced) == 2  # the last rows too


def test_a_failing_fsync_warns_once_and_the_rows_still_reach_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    now = [100.0]
    monkeypatch.setattr(records.time, "monotonic", lambda: now[0])

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    journal = Journal.open(tmp_path / "out")
    for index in range(4):
        now[0] += getattr(records, "FSYNC_INTERVAL_S", 1.0)
        journal.add(result(index))
        journal.tick()
        sync = getattr(journal, "_sync", None)
        if sync is not None:  # let the background sync fail before the next tick
            sync.exception()
    journal.close()
    err = capsys.readouterr().err
    assert err.count("Input/output error") == 1 and "cannot fsync" in err
    assert len((tmp_path / "out" / "requests.jsonl.partial").read_text().splitlines()) == 4
