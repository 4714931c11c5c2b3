"""The run journal (`requests.jsonl.partial`): rows on disk as the run goes, and a disk that
fails under it costs the journal, never the run."""

from __future__ import annotations

import json
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
