"""Push's one read of a model file: its bytes hashed as the signer hashed them and with SHA-256
(the registry's content address), and handed to the uploader as they are read.

model-signing's hashing API opens the files itself (`hashing.Config.hash(path)`), so a read
shared with the uploader needs the digests computed here, from the bytes read, exactly as the
library's serializers compute them: per file, or per `file:start:end` shard of `shard_size`
bytes (the last one shorter; an empty file has no shard), with sha256, blake2b or blake3.
tests/weights/test_push_reads.py checks that they equal the library's for every method and
algorithm, and that `list_model_files` finds the files the library hashes.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import blake3

from inhouse.weights.signature import Statement

READ_BYTES = 8 << 20  # one read; the uploader's parts are whole numbers of these
# model-signing ignores these at the model's root whenever git paths are ignored (always, here)
GIT_PATHS = (".git", ".gitattributes", ".github", ".gitignore")


class _Hasher(Protocol):
    def update(self, data: bytes | memoryview, /) -> Any: ...
    def hexdigest(self) -> str: ...


_HASHERS: dict[str, Callable[[], _Hasher]] = {
    "sha256": hashlib.sha256,
    "blake2b": hashlib.blake2b,  # model-signing's BLAKE2: hashlib's defaults (64-byte digest)
    "blake3": lambda: blake3.blake3(max_threads=blake3.blake3.AUTO),
}


@dataclass(frozen=True, slots=True)
class ModelFile:
    path: str  # relative to the model directory, '/'-separated
    size: int  # when listed; the digests carry the bytes actually read


@dataclass(frozen=True, slots=True)
class FileDigests:
    sha256: str
    size: int  # bytes read
    resources: dict[str, str]  # the signer's digests: file (or `file:start:end` shard) -> hex


def list_model_files(model_dir: Path) -> list[ModelFile]:
    """The files model-signing's hashing would hash, found without reading them: every regular
    file under `model_dir`, git metadata aside, sorted by path. ValueError, as the library
    raises it, for a symlink or special file anywhere (inside git metadata too)."""
    found = []
    for path in itertools.chain((model_dir,), model_dir.glob("**/*")):
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            raise ValueError(f"Cannot use '{path}' because it is a symlink.")
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ValueError(f"Cannot use '{path}' as file or directory: a special file.")
        relative = path.relative_to(model_dir)
        if stat.S_ISREG(mode) and not (relative.parts and relative.parts[0] in GIT_PATHS):
            found.append(ModelFile(relative.as_posix(), os.stat(path).st_size))
    return sorted(found, key=lambda f: f.path)


def resource_names(statement: Statement, file: ModelFile) -> list[str]:
    """The names the signer's hashing gives `file` at its listed size (one per shard)."""
    if statement.method != "shards":
        return [file.path]
    step = int(statement.serialization["shard_size"])
    ends = [*range(step, file.size, step), file.size] if file.size else []
    return [f"{file.path}:{start}:{end}" for start, end in zip([0, *ends], ends, strict=False)]


class Digester:
    """The digests of one file fed in order (`update`), as the signer's hashing finds them and
    with SHA-256; `only_sha256` skips the signer's (already checked in an earlier read)."""

    def __init__(self, statement: Statement, path: str, only_sha256: bool = False) -> None:
        serialization = statement.serialization
        self.path = path
        self.num_bytes = 0
        self._sha256 = hashlib.sha256()
        self._new_hasher = _HASHERS[str(serialization["hash_type"])]
        self._signer_is_sha256 = statement.lists_sha256
        self._shard_bytes: int | None = None
        if statement.method == "shards":
            self._shard_bytes = int(serialization["shard_size"])
        self._skip_signer = only_sha256 or self._signer_is_sha256
        self._shard_start = 0
        self._shard: _Hasher | None = None
        self._resources: dict[str, str] = {}

    def update(self, data: bytes) -> None:
        self._sha256.update(data)
        if not self._skip_signer:
            self._update_signer(memoryview(data))
        self.num_bytes += len(data)

    def _update_signer(self, data: memoryview) -> None:
        offset = self.num_bytes
        while data:
            if self._shard is None:
                self._shard, self._shard_start = self._new_hasher(), offset
            room = len(data)
            if self._shard_bytes is not None:
                room = self._shard_start + self._shard_bytes - offset
            self._shard.update(data[:room])
            offset, data = offset + min(room, len(data)), data[room:]
            if self._shard_bytes is not None and offset == self._shard_start + self._shard_bytes:
                self._close_shard(offset)

    def _close_shard(self, end: int) -> None:
        assert self._shard is not None, "a shard is open"
        name = self.path if self._shard_bytes is None else f"{self.path}:{self._shard_start}:{end}"
        self._resources[name] = self._shard.hexdigest()
        self._shard = None

    def finish(self) -> FileDigests:
        sha256 = self._sha256.hexdigest()
        if self._signer_is_sha256:
            self._resources = {self.path: sha256}
        elif not self._skip_signer:
            if self._shard is None and self._shard_bytes is None:
                self._shard = self._new_hasher()  # an empty file has a digest, but no shard
            if self._shard is not None:
                self._close_shard(self.num_bytes)
        return FileDigests(sha256, self.num_bytes, dict(self._resources))


def read_file(
    path: Path, digester: Digester, sink: Callable[[bytes], None] | None = None
) -> FileDigests:
    """Read `path` once, in order, into `digester` and `sink` (the uploader), the same bytes."""
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_BYTES):
            digester.update(chunk)
            if sink is not None:
                sink(chunk)
    return digester.finish()
