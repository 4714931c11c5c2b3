"""The per-request records of a run (`requests.jsonl`), and the journal that keeps them on disk
while the run goes.

    journal = Journal.open(out_dir, secrets)         # requests.jsonl.partial, truncated
    journal.add(result)    # as each request ends: one JSON line, buffered
    journal.tick()         # the driver's loop: written and flushed once a second (or 1,000
                           # rows), and fsynced at most once a second, off the loop
    journal.close()        # the run is over: the rest written and fsynced; `report.write_reports`
                           # then writes requests.jsonl and removes the .partial

A `kill -9`, an OOM kill or a crash leaves `requests.jsonl.partial` with every request that
ended up to the last flush, one row each, as `requests.jsonl` has them. Its name says the run
did not finish: `inhouse report` and `inhouse bench compare` refuse a run directory holding one,
and `inhouse bench report --partial DIR` summarises it (`bench.partial`).

NOTE: fsync, once a second at most, in a thread of its own. A flush reaches the kernel, which
a killed process cannot lose; a power cut loses what the kernel had not written out (up to
30 s with Linux's defaults). On the event loop an fsync would stall every request's timing for
as long as the disk takes (a millisecond on an idle SSD, far more on a busy disk), so one
thread syncs while the loop goes on; a sync still running when the next is due is not queued
behind it (the next flush asks again). A power cut thus loses about the last two seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO, cast

import numpy as np

from inhouse.bench.metrics import RequestResult
from inhouse.bench.redact import redact_text
from inhouse.errors import SpecError

REQUESTS_FILE = "requests.jsonl"
PARTIAL_FILE = "requests.jsonl.partial"  # a run that has not finished (or never will)
FLUSH_INTERVAL_S = 1.0
FLUSH_ROWS = 1000
FSYNC_INTERVAL_S = 1.0  # rows reach the disk at most this long after they reach the kernel
STRING_FIELDS = ("request_id", "session", "error")  # the row's strings (the rest are numbers)
VECTOR_FROM = 16


def request_row(r: RequestResult, t0: float, secrets: Sequence[str | None] = ()) -> bytes:
    """One request's `requests.jsonl` line (with its newline), every string in it redacted of
    the run's key; times from `t0`."""
    o = r.outcome
    row: dict[str, Any] = {
        "request_id": r.request_id,
        "session": r.session_key,
        "success": o.success,
        "error": o.error or None,
        "t_sched_s": round(o.t_sched - t0, 6),
        "t_send_s": round(o.t_send - t0, 6),
        "ttft_ms": round(o.ttft_s * 1000, 3),
        "e2el_ms": round(o.latency_s * 1000, 3),
        "input_len_client": r.num_prompt_tokens,
        "input_len_server": o.prompt_tokens,
        "output_len": r.output_len,
        "cached_tokens": o.cached_tokens,
        "ideal_cached_tokens": r.num_ideal_cached_tokens,
    }
    # NOTE: the key is scrubbed from every string in the row (its own keys are the schema); the
    # journal does this for each request as it ends, so it does no more than it must.
    for key in STRING_FIELDS:
        value = row[key]
        if isinstance(value, str):
            row[key] = redact_text(value, secrets)
    row["itl_ms"] = _milliseconds(o.itl_s)
    return _dumps(row) + b"\n"


def _json_bytes(row: dict[str, Any]) -> bytes:
    return json.dumps(row).encode()


try:  # orjson writes a row of 200 chunk gaps 4-5x faster; the stdlib is the fallback.
    import orjson

    _dumps: Callable[[dict[str, Any]], bytes] = orjson.dumps
except ImportError:  # pragma: no cover - depends on the environment
    _dumps = _json_bytes


def _milliseconds(seconds: list[float]) -> list[float]:
    """Each gap in ms to the microsecond; numpy past a few gaps (0.5 us each one by one)."""
    if len(seconds) < VECTOR_FROM:
        return [round(g * 1000, 3) for g in seconds]
    return cast(list[float], np.round(np.asarray(seconds) * 1000.0, 3).tolist())


class Journal:
    """`requests.jsonl.partial`, appended as requests end. The driver's loop calls `add` and
    `tick`; the cost is one JSON line per request and one write a second, and an fsync a second
    in a thread of its own (started by the first one)."""

    def __init__(self, handle: BinaryIO, path: Path, secrets: Sequence[str | None]) -> None:
        self.handle = handle
        self.path = path
        self.t0 = 0.0  # the origin of the rows' times: the driver sets its start
        self.secrets = tuple(secrets)
        self.num_rows = 0
        self.failed = False  # a write failed: no more rows (the run goes on)
        self._rows: list[bytes] = []
        self._last_flush = time.monotonic()
        self._last_sync = self._last_flush
        self._syncer: ThreadPoolExecutor | None = None
        self._sync: Future[None] | None = None
        self._sync_failed = False

    @classmethod
    def open(cls, out_dir: Path, secrets: Sequence[str | None] = ()) -> Journal:
        """A fresh journal in `out_dir` (made if need be); an unwritable directory is refused
        before the run, not after it."""
        path = out_dir / PARTIAL_FILE
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            handle = path.open("wb")
        except OSError as exc:
            raise SpecError(
                f"--out {out_dir}: cannot write {path} ({exc.strerror or exc}); give a "
                "directory you can write to"
            ) from None
        return cls(handle, path, secrets)

    def add(self, result: RequestResult) -> None:
        if self.failed:
            return
        self._rows.append(request_row(result, self.t0, self.secrets))
        if len(self._rows) >= FLUSH_ROWS:
            self.flush()

    def tick(self) -> None:
        """Flush when a second has passed since the last flush."""
        if self._rows and time.monotonic() - self._last_flush >= FLUSH_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._rows or self.failed:
            return
        try:
            self.handle.write(b"".join(self._rows))
            self.handle.flush()  # to the kernel: a killed process loses nothing written
        except OSError as exc:
            # NOTE: a full disk must not end a run that can still finish (its reports are
            # written at the end, from memory); the journal stops, and says so once.
            self.failed = True
            self._rows.clear()
            print(
                f"warning: cannot write {self.path} ({exc.strerror or exc}) after "
                f"{self.num_rows} request(s); the run goes on, but a kill or crash from here "
                "loses the requests since",
                file=sys.stderr,
            )
            return
        self.num_rows += len(self._rows)
        self._rows.clear()
        self._sync_now_and_then()

    def _sync_now_and_then(self) -> None:
        """fsync in the background when `FSYNC_INTERVAL_S` has passed since the last one began
        and it has finished."""
        if self._sync_failed or time.monotonic() - self._last_sync < FSYNC_INTERVAL_S:
            return
        if self._sync is not None:
            if not self._sync.done():
                return
            self._check_sync()
            if self._sync_failed:
                return
        if self._syncer is None:
            self._syncer = ThreadPoolExecutor(1, thread_name_prefix="journal-fsync")
        self._last_sync = time.monotonic()
        self._sync = self._syncer.submit(os.fsync, self.handle.fileno())

    def _check_sync(self) -> None:
        """A failed fsync (an I/O error) stops the syncing, with one warning; rows still go to
        the kernel, as a killed process needs."""
        error = self._sync.exception() if self._sync is not None else None
        self._sync = None
        if isinstance(error, OSError) and not self._sync_failed:
            self._sync_failed = True
            print(
                f"warning: cannot fsync {self.path} ({error.strerror or error}); its rows "
                "survive a killed run, not a power cut",
                file=sys.stderr,
            )

    def close(self) -> None:
        """The rest of the rows written and, once any sync under way is over, fsynced."""
        if not self.handle.closed:
            self.flush()
            if self._sync is not None:
                self._check_sync()  # waits for it
            if self._syncer is not None:
                self._syncer.shutdown()
            if not (self.failed or self._sync_failed):
                with contextlib.suppress(OSError, ValueError):
                    os.fsync(self.handle.fileno())
            with contextlib.suppress(OSError):
                self.handle.close()


def write_rows(rows: Sequence[bytes], out_dir: Path) -> None:
    """`requests.jsonl`, whole or not at all (a temporary file renamed over it)."""
    path = out_dir / REQUESTS_FILE
    temp = out_dir / (REQUESTS_FILE + ".tmp")
    with temp.open("wb") as handle:
        handle.writelines(rows)
    temp.replace(path)


def finish(out_dir: Path) -> None:
    """The run's reports are written: the journal goes."""
    (out_dir / PARTIAL_FILE).unlink(missing_ok=True)


def unfinished(run_dir: Path) -> str | None:
    """What is wrong with `run_dir` when a run there did not finish (killed or crashed before
    its reports were written: its journal is still there, beside nothing or beside an earlier
    run's files); None when no journal is left."""
    partial = run_dir / PARTIAL_FILE
    if not partial.exists():
        return None
    try:
        with partial.open("rb") as handle:
            rows = sum(1 for line in handle if line.strip())
    except OSError:
        rows = 0
    return (
        f"{partial}: the run in {run_dir} did not finish (killed or crashed before its reports "
        f"were written); that file holds the {rows} request(s) it measured until then "
        f"(`inhouse bench report --partial {run_dir}` summarises them, marked unfinished), and "
        "any result.json there is an earlier run's"
    )
