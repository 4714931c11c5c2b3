"""Pull a signed model from the registry into the node's cache, verified before it appears.

    result = pull_model(PullRequest(registry, "org/model", "v1", cache_root, trust))

1. Read the revision's manifest and signature; check the signature with the trusted key before
   fetching anything (a wrong key fails in milliseconds, not after 140 GB), and that it covers
   exactly the manifest's files.
2. If the model's content is cached, check the signature the same way, then link this name
   and revision to it: no bytes move (with `verify_cached`, the cached copy is re-hashed
   first, and set aside if it fails).
3. Otherwise fetch the files in parallel ranged parts into `partial/`, resuming what an
   interrupted pull left, verify the signature over them with model-signing, and only then
   rename the directory to its content address.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from inhouse.weights.cache import WeightCache, not_a_directory, write_atomic
from inhouse.weights.download import (
    DEFAULT_PART_BYTES,
    DEFAULT_WORKERS,
    JOURNAL,
    Fetcher,
    Journal,
    Part,
    RateLimit,
    plan_parts,
    prepare_files,
)
from inhouse.weights.errors import VerificationFailed, WeightsError
from inhouse.weights.file_pass import ModelFile, resource_names
from inhouse.weights.manifest import FileEntry, RegistryManifest
from inhouse.weights.messages import (
    describe_failure,
    describe_replaced_revision,
    registry_advice,
)
from inhouse.weights.registry import blob_key, hash_files, read_revision, resolve_revision
from inhouse.weights.s3 import RegistryUrl, make_client, s3_errors
from inhouse.weights.signature import Statement, read_statement
from inhouse.weights.trust import Trust
from inhouse.weights.verdict import Problem, Verification
from inhouse.weights.verify import FileHashes, check_signature, diff_resources, verify_model

log = logging.getLogger("inhouse.weights")


@dataclass(frozen=True)
class PullRequest:
    registry: RegistryUrl
    name: str
    revision: str | None  # None: the newest pushed
    cache: Path
    trust: Trust
    verify_cached: bool = False
    workers: int = DEFAULT_WORKERS
    part_bytes: int = DEFAULT_PART_BYTES
    max_bytes_per_s: float | None = None
    on_start: Callable[[int, int], None] = field(default=lambda total, have: None)
    on_bytes: Callable[[int], None] = field(default=lambda n: None)
    digest: str | None = None  # the content pinned (stack `digest:`, `--digest`); else any


@dataclass(frozen=True, slots=True)
class PullResult:
    name: str
    revision: str
    digest: str
    path: Path  # CACHE/by-name/<name>/<revision>: serve this
    signature: Path
    total_bytes: int
    fetched_bytes: int  # downloaded by this pull
    resumed_bytes: int  # already on disk from an interrupted pull
    was_cached: bool
    verification: Verification | None  # None: served from the cache without re-hashing
    quarantined: Path | None = None  # a cached copy that failed verification, moved here


def pull_model(request: PullRequest, client: Any = None) -> PullResult:
    client = client or make_client(max_connections=request.workers * 2)
    registry = request.registry
    revision = resolve_revision(client, registry, request.name, request.revision)
    manifest, signature = read_revision(client, registry, request.name, revision)
    cache = WeightCache(request.cache)
    cache.check_layout()
    _refuse_replaced_revision(request, cache, manifest)
    with cache.lock(manifest.digest), _cache_errors(cache.root):
        quarantined = cache.set_aside_foreign(manifest.digest)
        if cache.model_dir(manifest.digest).exists():
            statement = _check_cached_signature(request, manifest, signature)
            # NOTE: a signature without SHA-256s does not vouch for the manifest's, by which
            # the content was found: only hashing the cached copy tells whether it is signed.
            # Sizes are signed nowhere: a file whose size is not the manifest's (a failing
            # disk, a hand, or a registry that lies) only means the copy must be re-hashed;
            # the signature, not the size, decides whether it is set aside.
            resized = not cache.is_cached(manifest)
            verify = request.verify_cached or resized or not statement.lists_sha256
            cached = _use_cached(request, cache, manifest, signature, verify)
            if isinstance(cached, PullResult):
                return cached
            quarantined = cached
        result = _fetch_and_verify(request, client, cache, manifest, signature)
        return dataclasses.replace(result, quarantined=quarantined)


def _refuse_replaced_revision(
    request: PullRequest, cache: WeightCache, manifest: RegistryManifest
) -> None:
    """A revision whose content is not the pinned digest, or not the one this cache already
    linked it to, is refused (before any fetch), not linked: revisions are immutable, so the
    registry that says otherwise was altered or rolled back (another revision's signed files
    replayed under this one's name), and every signature in it checks out."""
    pinned = request.digest
    if pinned is not None and pinned != manifest.digest:
        linked: str | None = pinned
        holder = "the stack (or --digest) pins it"
    else:
        linked = cache.linked_digest(manifest.name, manifest.revision)
        holder = "this node pulled it"
    if linked is None or linked == manifest.digest:
        return
    where = f"{request.registry}/models/{manifest.name}/{manifest.revision}/manifest.json"
    problem = Problem("signature", where, "the registry replaced a revision this cache holds")
    verification = Verification(Path(where), cache.signature_of(manifest.name, manifest.revision),
                                request.trust.describe(), (problem,))  # fmt: skip
    link = cache.by_name(manifest.name, manifest.revision)
    revision = f"{manifest.name}@{manifest.revision}"
    message = describe_replaced_revision(
        revision, str(request.registry), manifest.digest, linked, holder, link
    )
    raise VerificationFailed(verification, message)


@contextlib.contextmanager
def _cache_errors(root: Path) -> Iterator[None]:
    """A failure to write the cache (disk full, read-only, an I/O error) as a WeightsError that
    says what to do. Network failures arrive as botocore's errors (`s3_errors` words them); a
    bare ConnectionError or TimeoutError is not the disk's, and passes."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, ConnectionError | TimeoutError):
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        raise WeightsError(
            f"cannot write the weight cache {root}: {exc.strerror or exc}{where}. Parts already "
            "fetched are kept in its partial/ directory: free space (or fix its permissions, or "
            "use another --cache) and run the pull again to resume"
        ) from exc


def _use_cached(
    request: PullRequest,
    cache: WeightCache,
    manifest: RegistryManifest,
    signature: bytes,
    verify: bool,
) -> PullResult | Path:
    """The cached copy, linked for this name and revision; or, when `verify` finds it
    altered, the place it was moved to."""
    with cache.name_lock(manifest.name, manifest.revision):
        _refuse_replaced_revision(request, cache, manifest)  # again: another pull may have linked
        link = cache.link(manifest, signature)
    verification = None
    if verify:
        verification = verify_model(link, request.trust)
        if not verification.ok:
            moved = cache.quarantine(manifest.digest)
            log.warning(
                "%s\nmoved the bad copy to %s; fetching a fresh one",
                describe_failure(verification),
                moved,
            )
            return moved
        if not cache.is_cached(manifest):  # verified, so the manifest's sizes were wrong
            manifest = _with_sizes_of(cache.model_dir(manifest.digest), manifest)
            link = cache.link(manifest, signature)
    return PullResult(
        manifest.name,
        manifest.revision,
        manifest.digest,
        link,
        cache.signature_of(manifest.name, manifest.revision),
        manifest.total_bytes,
        0,
        0,
        True,
        verification,
    )


def _with_sizes_of(model_dir: Path, manifest: RegistryManifest) -> RegistryManifest:
    """`manifest` with each file's size taken from `model_dir`, a copy that just verified: the
    registry's sizes are not signed (nor in the content digest), the verified files are."""
    wrong = [f for f in manifest.files if (model_dir / f.path).stat().st_size != f.size]
    log.warning(
        "the registry's manifest of %s@%s gives wrong sizes (%s says %d bytes, the verified "
        "copy has %d); kept the cached copy, which matches its signature. The manifest is not "
        "signed: it was altered, tell the release owner",
        manifest.name, manifest.revision, wrong[0].path, wrong[0].size,
        (model_dir / wrong[0].path).stat().st_size,
    )  # fmt: skip
    files = tuple(
        f.model_copy(update={"size": (model_dir / f.path).stat().st_size}) for f in manifest.files
    )
    return manifest.model_copy(update={"files": files})


def _check_cached_signature(
    request: PullRequest, manifest: RegistryManifest, signature: bytes
) -> Statement:
    """The check before a fetch, for a model whose content is cached (under any name): the
    same bytes signed by a key we do not trust are refused, not linked."""
    with tempfile.TemporaryDirectory(prefix="inhouse-pull-") as scratch:
        signature_path = Path(scratch) / "model.sig"
        signature_path.write_bytes(signature)
        return _check_before_fetch(request, manifest, signature_path, signature)


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _unsharded(statement: Statement, entry: FileEntry) -> bool:
    """A file the signature cannot list (`resource_names`: an empty file under shards, which
    has none), as push and verification read it. The manifest's entry is let through only if
    it is empty by its digest too; any byte in it is `extra` as before."""
    unlisted = not resource_names(statement, ModelFile(entry.path, entry.size))
    return unlisted and entry.sha256 == EMPTY_SHA256


def _check_before_fetch(
    request: PullRequest, manifest: RegistryManifest, signature_path: Path, signature: bytes
) -> Statement:
    """Refuse before any download: a signature that is not the one pushed, does not verify
    with the trusted key, or lists other files than the manifest. Returns its statement."""
    where = f"{request.registry}/models/{manifest.name}/{manifest.revision}/model.sig"
    problem = None
    if hashlib.sha256(signature).hexdigest() != manifest.signature.sha256:
        problem = Problem("signature", where, "it is not the signature pushed with this revision")
    else:
        checked = check_signature(signature_path, request.trust)
        if not checked.ok:
            assert checked.first is not None, "a failed check has a problem"
            problem = Problem(checked.first.kind, where, checked.first.detail)
    if problem is None:
        statement = read_statement(signature_path)
        listed = {f.path: f.sha256 for f in manifest.files if not _unsharded(statement, f)}
        signed = {p: listed.get(p, "?") for p in statement.files}
        if statement.lists_sha256:
            signed = statement.resources
        problems = diff_resources(signed, listed)
        if not problems:
            return statement
        problem = Problem(
            problems[0].kind,
            problems[0].path,
            "the registry's manifest disagrees with the signature",
        )
    trust = request.trust.describe()
    verification = Verification(Path(where), signature_path, trust, (problem,))
    raise VerificationFailed(verification, _refusal(manifest, verification))


def _refusal(manifest: RegistryManifest, verification: Verification) -> str:
    advised = registry_advice(verification)
    return f"refusing {manifest.name}@{manifest.revision}: " + describe_failure(
        verification, advised
    )


@dataclass(frozen=True)
class _Job:
    """A download in `partial/`: its files pre-sized, its parts, what the journal has."""

    model_dir: Path
    signature_path: Path
    parts: list[Part]
    journal: Journal
    have: set[int]

    @property
    def resumed_bytes(self) -> int:
        return sum(p.num_bytes for p in self.parts if p.index in self.have)


def _start_job(
    request: PullRequest, cache: WeightCache, manifest: RegistryManifest, signature: bytes
) -> _Job:
    partial = cache.partial_dir(manifest.digest)
    _discard_foreign(partial, manifest.files)
    signature_path = partial / "model.sig"
    write_atomic(signature_path, signature)
    _check_before_fetch(request, manifest, signature_path, signature)
    prepare_files(partial / "model", list(manifest.files))
    keyed = [(f, blob_key(request.registry, f.sha256)) for f in manifest.files]
    journal = Journal(partial / JOURNAL, _journal_header(manifest, request.part_bytes))
    parts = plan_parts(keyed, request.part_bytes)
    have = _known(journal, parts)
    journal.reset(have)
    job = _Job(partial / "model", signature_path, parts, journal, have)
    _check_space(partial, manifest.total_bytes - job.resumed_bytes)
    return job


def _journal_header(manifest: RegistryManifest, part_bytes: int) -> str:
    """What the journal's part numbers mean: the content, the part size and every file's size.
    NOTE: sizes are in neither the digest nor the signature; a manifest that changed them (a
    registry that lies, or one put right) numbers the parts differently, so it starts afresh."""
    sizes = "".join(f"{f.size} {f.path}\n" for f in manifest.files)
    plan = hashlib.sha256(sizes.encode("utf-8")).hexdigest()[:16]
    return f"inhouse-pull {manifest.digest} {part_bytes} {plan}"


def _discard_foreign(partial: Path, files: tuple[FileEntry, ...]) -> None:
    """Start afresh when an interrupted pull's directory is, or holds, what no pull writes: a
    symlink (planted at a path anyone can compute from the registry, it would redirect the
    pull's writes outside the cache), a special file, or a model file the manifest does not
    list (it would fail every verification as `extra`, or, under `.git/`, which verification
    skips, be installed with the model). Nothing is followed; the links are removed."""
    if not_a_directory(partial):
        log.warning("%s is not what a pull writes; starting it afresh", partial)
        partial.unlink()
        return
    listed = {f.path for f in files}
    parents = {str(parent) for f in files for parent in PurePosixPath(f.path).parents}
    model = partial / "model"
    for directory, subdirs, names in os.walk(partial):
        for name in subdirs + names:
            path = Path(directory) / name
            foreign = path.is_symlink() or not (path.is_dir() or path.is_file())
            if not foreign and path.is_relative_to(model) and path != model:
                relative = path.relative_to(model).as_posix()
                foreign = relative not in (parents if path.is_dir() else listed)
            if foreign:
                log.warning("%s is not what a pull writes; starting %s afresh", path, partial)
                shutil.rmtree(partial)
                return


def _check_space(directory: Path, needed_bytes: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < needed_bytes:
        raise WeightsError(
            f"not enough space for the pull in {directory}: it needs {needed_bytes / 1e9:.1f} GB "
            f"more, {free / 1e9:.1f} GB are free; free some (old models in sha256/ that no "
            "by-name link points at, quarantine/) or use another --cache"
        )


def _fetch_and_verify(
    request: PullRequest,
    client: Any,
    cache: WeightCache,
    manifest: RegistryManifest,
    signature: bytes,
) -> PullResult:
    job = _start_job(request, cache, manifest, signature)
    request.on_start(manifest.total_bytes, job.resumed_bytes)
    rate = RateLimit(request.max_bytes_per_s) if request.max_bytes_per_s else None
    statement = read_statement(job.signature_path)
    hashes = FileHashes(job.model_dir, statement)
    fetcher = Fetcher(client, request.registry.bucket, job.model_dir, job.journal,
                      request.workers, rate, request.on_bytes, hashes.add)  # fmt: skip
    resume = (
        f". The parts already fetched are kept in {job.model_dir.parent}: run the same command "
        "again to resume"
    )
    with s3_errors(f"pull {manifest.name}@{manifest.revision}", request.registry, resume):
        missing = [p for p in job.parts if p.index not in job.have]
        fetched, verification = _download(request, fetcher, hashes, list(manifest.files),
                                          missing, job.signature_path)  # fmt: skip
        refetched, lost, verification = _refetch_lost(request, job, fetcher, verification)
    if verification.ok and not statement.lists_sha256:
        verification = _check_content_address(job.model_dir, manifest, verification)
    if not verification.ok:
        _forget(job.journal, job.parts, {p.path for p in verification.file_problems})
        raise VerificationFailed(verification, _refusal(manifest, verification))
    with cache.name_lock(manifest.name, manifest.revision):
        _refuse_replaced_revision(request, cache, manifest)  # again: another pull may have linked
        cache.install(job.model_dir, manifest)
        link = cache.link(manifest, signature)
    _remove_partial(job.model_dir.parent)
    return PullResult(
        manifest.name, manifest.revision, manifest.digest, link,
        cache.signature_of(manifest.name, manifest.revision), manifest.total_bytes,
        fetched + refetched, job.resumed_bytes - lost, False, verification,
    )  # fmt: skip


def _check_content_address(
    model_dir: Path, manifest: RegistryManifest, verification: Verification
) -> Verification:
    """For a signature without SHA-256s, the verified files hashed with SHA-256 against the
    manifest's, the content address they are stored under: a manifest that gives other digests
    (to file these bytes under another model's address) is refused."""
    found = {f.path: f.sha256 for f in hash_files(model_dir)}
    detail = "its SHA-256 is not the registry manifest's: the manifest was altered"
    problems = diff_resources({f.path: f.sha256 for f in manifest.files}, found)
    problems = [dataclasses.replace(p, detail=detail) for p in problems]
    return dataclasses.replace(verification, problems=tuple(problems))


def _refetch_lost(
    request: PullRequest, job: _Job, fetcher: Fetcher, verification: Verification
) -> tuple[int, int, Verification]:
    """When every problem is in a file that had parts from an interrupted pull, those parts did
    not survive (a crash before the page cache reached the disk): fetch those files again,
    once, and verify by hashing everything. Returns (bytes fetched again, bytes of kept parts
    that were dropped, the new verification)."""
    resumed_files = {p.path for p in job.parts if p.index in job.have}
    retry = {p.path for p in verification.file_problems}
    if not retry or not retry <= resumed_files:
        return 0, 0, verification
    _forget(job.journal, job.parts, retry)
    again = [p for p in job.parts if p.path in retry]
    fetched = dataclasses.replace(fetcher, on_file=lambda path: None).fetch(again)
    lost = sum(p.num_bytes for p in again if p.index in job.have)
    return fetched, lost, verify_model(job.model_dir, request.trust, job.signature_path)


def _download(
    request: PullRequest,
    fetcher: Fetcher,
    hashes: FileHashes,
    files: list[FileEntry],
    missing: list[Part],
    signature_path: Path,
) -> tuple[int, Verification]:
    """Fetch the missing parts while the library hashes each file as it completes (files
    already whole are hashed at once), then verify the signature over those digests."""
    pending = {p.path for p in missing}
    for entry in files:
        if entry.path not in pending:
            hashes.add(entry.path)
    try:
        fetched = fetcher.fetch(missing)
    finally:
        digests = hashes.digests()
    return fetched, verify_model(fetcher.model_dir, request.trust, signature_path, digests)


def _known(journal: Journal, parts: list[Part]) -> set[int]:
    """The journaled parts of this plan. NOTE: a number past its last part (the journal lies
    in a cache others may write to) names no part: it is ignored, not an IndexError."""
    return {i for i in journal.load() if i < len(parts)}


def _forget(journal: Journal, parts: list[Part], paths: set[str]) -> None:
    """Drop the journaled parts of `paths`, so they are fetched again."""
    journal.reset({i for i in _known(journal, parts) if parts[i].path not in paths})


def _remove_partial(partial: Path) -> None:
    """What is left once the model is installed: the journal, the signature, and any temporary
    file a killed pull left. The pull has succeeded: what cannot be removed stays."""
    shutil.rmtree(partial, ignore_errors=True)
