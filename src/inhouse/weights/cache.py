"""The node's weight cache (its NVMe), content-addressed:

    CACHE/sha256/<digest>/                 a verified model, by its content digest
    CACHE/by-name/<name>/<revision>        -> ../../sha256/<digest> (relative symlink)
    CACHE/by-name/<name>/<revision>.sig    that revision's signature (MODEL_DIR.sig)
    CACHE/by-name/<name>/<revision>.json   its registry manifest
    CACHE/partial/<digest>/                a pull in progress: files, signature, part journal
    CACHE/locks/<digest>.lock              one pull of a model at a time (pods on one node)
    CACHE/quarantine/<digest>.<n>/         a cached copy that failed verification, kept

A model appears under `sha256/` only by an atomic rename after it verified. Symlinks are
relative so the cache works wherever it is mounted (a pod mounts it at /models/registry).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from inhouse.spec.weights import BY_DIGEST_DIR, BY_NAME_DIR, by_name_path
from inhouse.weights.errors import WeightsError
from inhouse.weights.manifest import RegistryManifest

DEFAULT_CACHE = Path.home() / ".cache" / "inhouse" / "weights"
CACHE_ENV = "INHOUSE_WEIGHTS_CACHE"
# The cache's own directories: inhouse makes each a directory, never a link.
SUBDIRS = ("partial", BY_DIGEST_DIR, BY_NAME_DIR, "locks", "quarantine")

log = logging.getLogger("inhouse.weights")


def default_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def _hex(digest: str) -> str:
    algorithm, _, value = digest.partition(":")
    assert algorithm == "sha256" and len(value) == 64, f"not a model digest: {digest}"
    return value


def not_a_directory(path: Path) -> bool:
    """Whether something is at `path` that is a link (to anything) or not a directory: never
    what inhouse makes where it makes a directory."""
    return path.is_symlink() or (path.exists() and not path.is_dir())


def write_atomic(path: Path, data: bytes) -> None:
    """Write `path` whole or not at all. NOTE: the temporary file is created afresh under a
    random name (never through a link someone planted at a name they could guess), and
    removed when the write fails (a full disk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(name, 0o644)
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise


class WeightCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def check_layout(self) -> None:
        """Refuse a cache whose own directories (`partial/`, `sha256/`, ...) are links: the
        pull's writes, or the directory the engines load, would go wherever they point. The
        cache's root itself may be a link (a mount moved elsewhere)."""
        for name in SUBDIRS:
            path = self.root / name
            if not_a_directory(path):
                kind = "a symlink" if path.is_symlink() else "not a directory"
                raise WeightsError(
                    f"{path} is {kind}; inhouse makes it a directory, and a pull would write (or "
                    "an engine load) wherever it points: move it away (inspect it first: someone "
                    "else can write to this cache) and pull again"
                )

    def set_aside_foreign(self, digest: str) -> Path | None:
        """Move `sha256/<digest>` aside when it is not a directory (a link planted there could
        be re-pointed after it verified, at files nobody verified); where it went, or None."""
        path = self.model_dir(digest)
        if not not_a_directory(path):
            return None
        moved = self.quarantine(digest)
        log.warning("%s was not a directory a pull made (a link?); moved it to %s", path, moved)
        return moved

    def model_dir(self, digest: str) -> Path:
        return self.root / BY_DIGEST_DIR / _hex(digest)

    def partial_dir(self, digest: str) -> Path:
        return self.root / "partial" / _hex(digest)

    def by_name(self, name: str, revision: str) -> Path:
        return self.root / by_name_path(name, revision)

    def signature_of(self, name: str, revision: str) -> Path:
        path = self.by_name(name, revision)
        return path.with_name(path.name + ".sig")

    def linked_digest(self, name: str, revision: str) -> str | None:
        """The content digest `by-name/<name>/<revision>` points at (dangling or not), or None
        when the revision was never linked here."""
        link = self.by_name(name, revision)
        self._refuse_nested(link)
        try:
            target = Path(os.readlink(link))
        except FileNotFoundError:
            return None
        except OSError as exc:  # EINVAL: there, but not a symlink
            if link.is_dir():
                raise WeightsError(
                    f"cannot link {link}: it is the directory of model {name}/{revision}'s "
                    "revisions, and a revision cannot share a model's path; pull one of them "
                    "into another --cache, or push it under another name"
                ) from exc
            raise WeightsError(
                f"{link} is not a link inhouse made ({exc.strerror}); move it away and pull again"
            ) from exc
        return f"sha256:{target.name}"

    def _refuse_nested(self, link: Path) -> None:
        """A name whose by-name path runs through another revision's link (`org/model@v1`
        under `org@model`'s) would be written into that revision's verified model."""
        base = self.root / BY_NAME_DIR
        path = base
        for part in link.parent.relative_to(base).parts:
            path = path / part
            if path.is_symlink():
                other = path.relative_to(base)
                raise WeightsError(
                    f"cannot link {link.relative_to(base)} in {base}: {other} is the link of "
                    f"revision {other.parent}@{other.name}, and a model name cannot run through "
                    "another's revision; pull one of them into another --cache, or push it "
                    "under another name"
                )

    @contextlib.contextmanager
    def lock(self, digest: str) -> Iterator[None]:
        """Exclusive for one model across processes; a second pull waits, then finds it
        cached."""
        with self._lock(self.root / "locks" / f"{_hex(digest)}.lock", digest):
            yield

    @contextlib.contextmanager
    def name_lock(self, name: str, revision: str) -> Iterator[None]:
        """Exclusive for one name and revision across processes, held from the check that it is
        not linked to other content to its link (two pulls of other contents under one
        revision each passed the check, then both linked it). Taken inside `lock`, never
        around it."""
        key = hashlib.sha256(f"{name}@{revision}".encode()).hexdigest()[:32]
        with self._lock(self.root / "locks" / f"name-{key}.lock", f"{name}@{revision}"):
            yield

    @contextlib.contextmanager
    def _lock(self, path: Path, what: str) -> Iterator[None]:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = os.fdopen(_open_lock(path), "r")
        except OSError as exc:
            raise WeightsError(f"cannot use weight cache {self.root}: {exc.strerror}") from exc
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.warning(
                    "another pull of %s on this node holds %s; waiting for it to finish (the "
                    "lock goes with that process: if it hangs, find and stop it)",
                    what,
                    path,
                )
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def is_cached(self, manifest: RegistryManifest) -> bool:
        """The model's directory exists and every file has its manifest size (a stat each, no
        hashing: verification re-hashes)."""
        directory = self.model_dir(manifest.digest)
        for entry in manifest.files:
            try:
                if (directory / entry.path).stat().st_size != entry.size:
                    return False
            except OSError:
                return False
        return True

    def install(self, partial_model: Path, manifest: RegistryManifest) -> Path:
        """Move a verified download to its content address (atomic rename)."""
        target = self.model_dir(manifest.digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partial_model, target)
        return target

    def link(self, manifest: RegistryManifest, signature: bytes) -> Path:
        """Point by-name/<name>/<revision> at the model and write its signature and manifest
        beside it. Each file appears atomically."""
        link = self.by_name(manifest.name, manifest.revision)
        self._refuse_nested(link)
        link.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.signature_of(manifest.name, manifest.revision), signature)
        write_atomic(link.with_name(link.name + ".json"), manifest.model_dump_json().encode())
        relative = os.path.relpath(self.model_dir(manifest.digest), link.parent)
        temporary = link.with_name(f".{link.name}.{os.getpid()}.link")
        temporary.unlink(missing_ok=True)
        os.symlink(relative, temporary)
        os.replace(temporary, link)
        return link

    def quarantine(self, digest: str) -> Path:
        """Move a cached copy that failed verification aside, for inspection; nothing is
        deleted."""
        base = self.root / "quarantine"
        base.mkdir(parents=True, exist_ok=True)
        for number in range(1, 10_000):
            target = base / f"{_hex(digest)}.{number}"
            if not target.exists():
                os.replace(self.model_dir(digest), target)
                return target
        raise WeightsError(f"too many quarantined copies in {base}; inspect and remove them")


def _open_lock(path: Path) -> int:
    """The lock file, never through a link (which `open` would follow, creating the file it
    names): a link planted there is removed and the lock made afresh."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
    log.warning("%s was a symlink, not a lock a pull made; replaced it", path)
    path.unlink()
    return os.open(path, flags | os.O_EXCL, 0o644)
