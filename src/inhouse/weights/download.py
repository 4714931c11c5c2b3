"""Fetch a model's files in parallel ranged parts, resumably.

Every file is cut into parts of `part_bytes`; workers GET one part each (`Range`) and write it
in place (`pwrite` into the file, pre-sized). A part is recorded in the journal only after all
its bytes are written, so a pull killed at any moment keeps every finished part and refetches
only the rest: the next pull reads the journal and skips what it lists. The journal's header
names the model and the part size; a different one starts afresh. Nothing here trusts the
bytes: the caller verifies the signature over the finished files.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.exceptions

from inhouse.weights.errors import WeightsError
from inhouse.weights.manifest import FileEntry
from inhouse.weights.messages import REPUSH, shown
from inhouse.weights.s3 import error_code, is_not_found

DEFAULT_PART_BYTES = 16 * 2**20
DEFAULT_WORKERS = 8
READ_BYTES = 2**20
JOURNAL = "parts.journal"


@dataclass(frozen=True, slots=True)
class Part:
    index: int
    path: str  # relative to the model directory
    key: str  # the object holding the file
    start: int
    end: int  # exclusive
    file_bytes: int  # the whole file's size, as the registry's manifest says

    @property
    def num_bytes(self) -> int:
        return self.end - self.start


def plan_parts(files: list[tuple[FileEntry, str]], part_bytes: int) -> list[Part]:
    """Parts for (file, object key) pairs, in order: a file's parts are consecutive."""
    assert part_bytes > 0, "part size must be positive"
    parts: list[Part] = []
    for entry, key in files:
        for start in range(0, entry.size, part_bytes):
            end = min(start + part_bytes, entry.size)
            parts.append(Part(len(parts), entry.path, key, start, end, entry.size))
    return parts


class Journal:
    """Which parts are on disk. Appends one line per finished part; thread-safe."""

    def __init__(self, path: Path, header: str) -> None:
        self.path = path
        self.header = header
        self._lock = threading.Lock()

    def load(self) -> set[int]:
        """Indices already fetched, or nothing when the journal is absent or for another
        plan. A torn last line (a kill mid-write) is ignored."""
        try:
            lines = self.path.read_text(encoding="ascii", errors="replace").split("\n")
        except FileNotFoundError:
            return set()
        if not lines or lines[0] != self.header:
            return set()
        done = set()
        for line in lines[1:-1]:  # the text after the last newline may be torn
            if line.isdigit():
                done.add(int(line))
        return done

    def reset(self, keep: set[int]) -> None:
        text = self.header + "\n" + "".join(f"{i}\n" for i in sorted(keep))
        self.path.write_text(text, encoding="ascii")

    def record(self, index: int) -> None:
        with self._lock, self.path.open("a", encoding="ascii") as handle:
            handle.write(f"{index}\n")


class RateLimit:
    """At most `bytes_per_s` across all workers (a token bucket, one second deep)."""

    def __init__(self, bytes_per_s: float) -> None:
        assert bytes_per_s > 0, "rate must be positive"
        self.bytes_per_s = bytes_per_s
        self._lock = threading.Lock()
        self._allowance = 0.0
        self._last = time.monotonic()

    def take(self, num_bytes: int) -> None:
        with self._lock:
            now = time.monotonic()
            self._allowance = min(
                self.bytes_per_s, self._allowance + (now - self._last) * self.bytes_per_s
            )
            self._last = now
            self._allowance -= num_bytes
            wait_s = -self._allowance / self.bytes_per_s if self._allowance < 0 else 0.0
        if wait_s > 0:
            time.sleep(wait_s)


def prepare_files(model_dir: Path, files: list[FileEntry]) -> None:
    """Create every file at its final size (sparse); a file already that size is kept."""
    for entry in files:
        path = model_dir / entry.path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            if os.fstat(fd).st_size != entry.size:
                os.ftruncate(fd, entry.size)
        finally:
            os.close(fd)


@dataclass
class Fetcher:
    """Runs the GETs. `on_bytes` sees every chunk written (the progress bar); `on_file` each
    file whose last part of this fetch was written (to hash it while the rest downloads)."""

    client: Any
    bucket: str
    model_dir: Path
    journal: Journal
    workers: int = DEFAULT_WORKERS
    rate: RateLimit | None = None
    on_bytes: Callable[[int], None] = lambda n: None
    on_file: Callable[[str], None] = lambda path: None

    def fetch(self, parts: list[Part]) -> int:
        """Fetch `parts`; returns the bytes fetched. On the first failure the rest are
        cancelled (finished ones stay journaled) and the error is raised."""
        if not parts:
            return 0
        remaining: dict[str, int] = {}
        for part in parts:
            remaining[part.path] = remaining.get(part.path, 0) + 1
        lock = threading.Lock()

        def fetch_part(part: Part) -> int:
            size = self._fetch_part(part)
            with lock:
                remaining[part.path] -= 1
                is_last = remaining[part.path] == 0
            if is_last:
                self.on_file(part.path)
            return size

        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="weights-pull")
        futures = [pool.submit(fetch_part, part) for part in parts]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in done:
                future.result()  # raises the first failure
            return sum(f.result() for f in futures)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _fetch_part(self, part: Part) -> int:
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=part.key, Range=f"bytes={part.start}-{part.end - 1}"
            )
        except botocore.exceptions.ClientError as exc:
            if error_code(exc) == "InvalidRange":  # the part starts past the object's end
                raise WeightsError(_wrong_size(part, "shorter")) from exc
            if is_not_found(exc):
                raise WeightsError(
                    f"{shown(part.path)}: its content ({part.key}) is not in the registry: the "
                    f"revision is incomplete or its manifest was altered; {REPUSH}"
                ) from exc
            raise
        body = response["Body"]
        content_range = str(response.get("ContentRange", ""))
        total = content_range.rpartition("/")[2]
        if total.isdigit() and int(total) != part.file_bytes:
            body.close()
            raise WeightsError(_wrong_size(part, f"{int(total):,} bytes"))
        expected_range = f"bytes {part.start}-{part.end - 1}/"
        if not content_range.startswith(expected_range):
            body.close()
            raise WeightsError(
                f"{part.key}: the S3 server answered a ranged GET without the range asked "
                f"for ({response.get('ContentRange')!r}, expected {expected_range}…); it must "
                "support Range requests"
            )
        offset = part.start
        fd = os.open(self.model_dir / part.path, os.O_WRONLY | os.O_NOFOLLOW)
        try:
            while offset < part.end:
                chunk = body.read(min(READ_BYTES, part.end - offset))
                if not chunk:
                    break
                if self.rate is not None:
                    self.rate.take(len(chunk))
                os.pwrite(fd, chunk, offset)
                offset += len(chunk)
                self.on_bytes(len(chunk))
        finally:
            os.close(fd)
            body.close()
        if offset != part.end:
            raise WeightsError(
                f"{part.key}: the server sent {offset - part.start} of {part.num_bytes} bytes "
                f"of part {part.index}; run the pull again to resume"
            )
        self.journal.record(part.index)
        return part.num_bytes


def _wrong_size(part: Part, found: str) -> str:
    return (
        f"{shown(part.path)}: the registry's manifest says {part.file_bytes:,} bytes, but its "
        f"content ({part.key}) is {found}: the manifest (or the object) was altered; {REPUSH}"
    )
