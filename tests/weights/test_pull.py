"""Pulls from a real S3 server into the content-addressed cache: verified before the atomic
rename, free the second time, resumed without refetching, refused when the registry's copy was
altered, healed with --verify-cached, one download for concurrent pulls."""

from __future__ import annotations

import base64
import dataclasses
import errno
import hashlib
import itertools
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import botocore.exceptions
import pytest
from tests.weights.clients import CountingClient, DroppedConnection
from tests.weights.conftest import SHARD, Keys, Tampering

from inhouse.weights.cache import WeightCache
from inhouse.weights.download import DEFAULT_PART_BYTES, plan_parts
from inhouse.weights.errors import VerificationFailed, WeightsError
from inhouse.weights.manifest import FileEntry, RegistryManifest, model_digest
from inhouse.weights.pull import PullRequest, PullResult, pull_model
from inhouse.weights.registry import blob_key, push_model, read_revision, revision_key
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import sign_model
from inhouse.weights.trust import Trust, keygen
from inhouse.weights.verify import verify_model

NAME = "acme/tiny"
PART = 256 * 1024  # small parts: the tiny model's 2 MiB shards have 8 each


def request(
    url: RegistryUrl, cache: Path, trust: Trust, revision: str | None = "v1", **kwargs: object
) -> PullRequest:
    values: dict[str, object] = {"part_bytes": PART, "workers": 4, **kwargs}
    return PullRequest(url, NAME, revision, cache, trust, **values)  # type: ignore[arg-type]


@pytest.fixture
def pushed(signed_model: Path, registry: str) -> RegistryUrl:
    url = RegistryUrl.parse(registry)
    push_model(make_client(), signed_model, url, NAME, "v1")
    return url


def test_a_pull_verifies_and_lands_at_its_content_address(
    pushed: RegistryUrl, signed_model: Path, keys: Keys, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    client = CountingClient(make_client())
    result = pull_model(request(pushed, cache, keys.trust), client)
    assert result.verification is not None and result.verification.ok
    assert not result.was_cached and result.resumed_bytes == 0
    assert result.fetched_bytes == result.total_bytes == client.blob_bytes
    assert result.path == cache / "by-name" / NAME / "v1"
    assert result.path.resolve() == WeightCache(cache).model_dir(result.digest)
    for original in signed_model.iterdir():
        assert (result.path / original.name).read_bytes() == original.read_bytes()
    assert result.signature.read_bytes() == signed_model.with_name("tiny.sig").read_bytes()
    assert not (cache / "partial" / result.digest.split(":")[1]).exists()
    assert verify_model(result.path, keys.trust).ok  # by-name path + default .sig beside it


def test_a_second_pull_is_free(pushed: RegistryUrl, keys: Keys, tmp_path: Path) -> None:
    pull_model(request(pushed, tmp_path / "c", keys.trust))
    client = CountingClient(make_client())
    again = pull_model(request(pushed, tmp_path / "c", keys.trust), client)
    assert again.was_cached and again.fetched_bytes == 0 and client.blob_gets == 0
    assert again.verification is None  # no re-hash unless asked


def test_the_newest_revision_when_none_is_named(
    pushed: RegistryUrl, signed_model: Path, keys: Keys, tmp_path: Path
) -> None:
    push_model(make_client(), signed_model, pushed, NAME, "v2")
    result = pull_model(request(pushed, tmp_path / "c", keys.trust, revision=None))
    assert result.revision == "v2"


def test_an_interrupted_pull_resumes_without_refetching_what_it_has(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    cache = tmp_path / "c"
    manifest, _ = read_revision(make_client(), pushed, NAME, "v1")
    parts = plan_parts([(f, "") for f in manifest.files], PART)
    drop_at = sum(p.num_bytes for p in parts[:8]) + PART // 2  # inside the ninth part
    dropping = CountingClient(make_client(), fail_after_bytes=drop_at)
    with pytest.raises(DroppedConnection):
        pull_model(request(pushed, cache, keys.trust, workers=1), dropping)
    assert not WeightCache(cache).model_dir(manifest.digest).exists()  # nothing half-served
    assert not (cache / "by-name" / NAME / "v1").exists()
    resuming = CountingClient(make_client())
    result = pull_model(request(pushed, cache, keys.trust, workers=1), resuming)
    kept = sum(p.num_bytes for p in parts[:8])  # eight finished parts; the torn ninth refetched
    assert result.resumed_bytes == kept
    assert resuming.blob_bytes == result.fetched_bytes == result.total_bytes - kept
    assert resuming.blob_gets == len(parts) - 8
    assert result.verification is not None and result.verification.ok


def test_resumed_parts_that_did_not_survive_are_fetched_again(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    """A crash can keep the journal but lose the data (page cache never reached the disk):
    verification catches it, and the pull refetches those files once."""
    cache = tmp_path / "c"
    dropping = CountingClient(make_client(), fail_after_bytes=10 * PART)
    with pytest.raises(DroppedConnection):
        pull_model(request(pushed, cache, keys.trust, workers=1), dropping)
    partial = next((cache / "partial").iterdir()) / "model"
    with (partial / "model-00001-of-00002.safetensors").open("r+b") as handle:
        handle.seek(PART // 3)
        handle.write(b"\0" * 64)  # lost bytes of a journaled part
    journal = (partial.parent / "parts.journal").read_text().splitlines()[1:]
    manifest, _ = read_revision(make_client(), pushed, NAME, "v1")
    parts = plan_parts([(f, "") for f in manifest.files], PART)
    kept = [parts[int(i)] for i in journal]
    result = pull_model(request(pushed, cache, keys.trust, workers=1))
    assert result.verification is not None and result.verification.ok
    lost_file = "model-00001-of-00002.safetensors"
    assert result.resumed_bytes == sum(p.num_bytes for p in kept if p.path != lost_file)
    assert result.fetched_bytes == result.total_bytes - result.resumed_bytes


def test_a_journal_line_past_the_last_part_is_ignored(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    """The journal is a file in a cache others may write to: a part number past the plan's
    last (planted, or a torn append run into the next line) was an IndexError traceback once
    a kept part had to be fetched again. It names no part: it is ignored."""
    cache = tmp_path / "c"
    dropping = CountingClient(make_client(), fail_after_bytes=10 * PART)
    with pytest.raises(DroppedConnection):
        pull_model(request(pushed, cache, keys.trust, workers=1), dropping)
    partial = next((cache / "partial").iterdir()) / "model"
    with (partial / "model-00001-of-00002.safetensors").open("r+b") as handle:
        handle.seek(PART // 3)
        handle.write(b"\0" * 64)  # lost bytes of a journaled part: it is fetched again
    with (partial.parent / "parts.journal").open("a") as journal:
        journal.write("999999\n")
    result = pull_model(request(pushed, cache, keys.trust, workers=1))
    assert result.verification is not None and result.verification.ok


def _tamper_registry(url: RegistryUrl, tampering: Tampering, signed_model: Path) -> None:
    """What an attacker with write access to the bucket does, consistently: the manifest
    still adds up, only the signature disagrees."""
    client = make_client()
    manifest, _ = read_revision(client, url, NAME, "v1")
    files = list(manifest.files)
    if tampering.name == "byte":
        entry = next(f for f in files if f.path == tampering.path)
        data = bytearray((signed_model / entry.path).read_bytes())
        data[len(data) // 2] ^= 1
        client.put_object(Bucket=url.bucket, Key=blob_key(url, entry.sha256), Body=bytes(data))
    elif tampering.name == "added":
        body = b"import os\n"
        entry = FileEntry(
            path=tampering.path, size=len(body), sha256=hashlib.sha256(body).hexdigest()
        )
        client.put_object(Bucket=url.bucket, Key=blob_key(url, entry.sha256), Body=body)
        files.append(entry)
    else:
        files = [f for f in files if f.path != tampering.path]
    changed = manifest.model_copy(update={"files": tuple(files), "digest": model_digest(files)})
    key = revision_key(url, NAME, "v1", "manifest.json")
    client.put_object(Bucket=url.bucket, Key=key, Body=changed.model_dump_json().encode())


def test_a_tampered_registry_copy_is_refused_and_never_appears(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path, signed_model: Path, tampering: Tampering
) -> None:
    _tamper_registry(pushed, tampering, signed_model)
    cache = tmp_path / "c"
    with pytest.raises(VerificationFailed) as raised:
        pull_model(request(pushed, cache, keys.trust))
    first = raised.value.verification.first
    assert first is not None and (first.kind, first.path) == (tampering.kind, tampering.path)
    assert f"refusing {NAME}@v1" in str(raised.value)
    assert not (cache / "sha256").exists() or not any((cache / "sha256").iterdir())
    assert not (cache / "by-name" / NAME / "v1").exists()


def test_a_corrupted_signature_in_the_registry_is_refused_before_any_download(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    client = make_client()
    key = revision_key(pushed, NAME, "v1", "model.sig")
    bundle = json.loads(client.get_object(Bucket=pushed.bucket, Key=key)["Body"].read())
    sig = bytearray(base64.b64decode(bundle["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[5] ^= 1
    bundle["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    client.put_object(Bucket=pushed.bucket, Key=key, Body=json.dumps(bundle).encode())
    counting = CountingClient(make_client())
    with pytest.raises(VerificationFailed) as raised:
        pull_model(request(pushed, tmp_path / "c", keys.trust), counting)
    first = raised.value.verification.first
    assert first is not None and first.kind == "signature" and first.path.endswith("model.sig")
    assert counting.blob_gets == 0


def test_a_wrong_key_is_refused_before_any_download(pushed: RegistryUrl, tmp_path: Path) -> None:
    keygen(tmp_path / "other")
    counting = CountingClient(make_client())
    with pytest.raises(VerificationFailed, match="Key mismatch"):
        pull_model(request(pushed, tmp_path / "c", Trust(public_key=tmp_path / "other/key.pub")),
                   counting)  # fmt: skip
    assert counting.blob_gets == 0


def test_verify_cached_moves_a_tampered_copy_aside_and_fetches_again(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    cache = tmp_path / "c"
    first = pull_model(request(pushed, cache, keys.trust))
    Tampering("byte", "altered", SHARD).apply(first.path)
    unchecked = pull_model(request(pushed, cache, keys.trust))
    assert unchecked.was_cached  # a plain cached pull does not re-hash
    healed = pull_model(request(pushed, cache, keys.trust, verify_cached=True))
    assert healed.quarantined is not None and (healed.quarantined / SHARD).is_file()
    assert not healed.was_cached and healed.fetched_bytes == healed.total_bytes
    assert verify_model(healed.path, keys.trust).ok


def test_the_same_content_under_another_name_is_not_fetched_twice(
    pushed: RegistryUrl, signed_model: Path, keys: Keys, tmp_path: Path
) -> None:
    push_model(make_client(), signed_model, pushed, "acme/tiny-copy", "v1")
    cache = tmp_path / "c"
    a = pull_model(request(pushed, cache, keys.trust))
    counting = CountingClient(make_client())
    b = pull_model(PullRequest(pushed, "acme/tiny-copy", "v1", cache, keys.trust), counting)
    assert b.was_cached and counting.blob_gets == 0
    assert a.path.resolve() == b.path.resolve() and a.path != b.path


def test_concurrent_pulls_of_one_model_download_it_once(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    counting = CountingClient(make_client())
    results: list[PullResult] = []

    def pull() -> None:
        results.append(pull_model(request(pushed, tmp_path / "c", keys.trust), counting))

    threads = [threading.Thread(target=pull) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3 and sum(not r.was_cached for r in results) == 1
    assert counting.blob_bytes == results[0].total_bytes


def test_unknown_model_and_default_part_size(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    assert DEFAULT_PART_BYTES == 16 * 2**20
    with pytest.raises(WeightsError, match="no revision of 'acme/none'"):
        pull_model(PullRequest(pushed, "acme/none", None, tmp_path / "c", keys.trust))


def test_a_pull_that_cannot_fit_says_so_before_fetching(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full = shutil._ntuple_diskusage(total=10**9, used=10**9 - 1000, free=1000)  # type: ignore[attr-defined]
    monkeypatch.setattr("inhouse.weights.pull.shutil.disk_usage", lambda path: full)
    counting = CountingClient(make_client())
    with pytest.raises(WeightsError, match="not enough space for the pull"):
        pull_model(request(pushed, tmp_path / "c", keys.trust), counting)
    assert counting.blob_gets == 0


def test_a_disk_that_fills_mid_pull_is_an_error_to_act_on_and_the_pull_resumes(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The space check passed, then the disk filled (another pull, a log): the OSError from
    writing a part escaped as a traceback."""
    cache = tmp_path / "c"
    real_pwrite = os.pwrite
    num_writes = [0]

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        num_writes[0] += 1
        if num_writes[0] > 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr("inhouse.weights.download.os.pwrite", pwrite)
    with pytest.raises(WeightsError, match=r"No space left on device.*run the pull again"):
        pull_model(request(pushed, cache, keys.trust, workers=1))
    assert not (cache / "by-name" / NAME / "v1").exists()
    monkeypatch.setattr("inhouse.weights.download.os.pwrite", real_pwrite)
    result = pull_model(request(pushed, cache, keys.trust, workers=1))
    assert result.verification is not None and result.verification.ok
    assert (
        result.resumed_bytes > 0
        and result.fetched_bytes == result.total_bytes - result.resumed_bytes
    )


def test_a_cached_model_under_a_signature_the_key_does_not_trust_is_refused(
    pushed: RegistryUrl, signed_model: Path, keys: Keys, tmp_path: Path
) -> None:
    """Someone pushes the same bytes under another name, signed with their own key: the content
    is cached, and the cache hit linked it without checking the signature at all."""
    cache = tmp_path / "c"
    pull_model(request(pushed, cache, keys.trust))
    keygen(tmp_path / "theirs")
    theirs = tmp_path / "theirs.sig"
    sign_model(signed_model, tmp_path / "theirs" / "key.priv", signature=theirs)
    push_model(make_client(), signed_model, pushed, "acme/impostor", "v1", signature=theirs)
    impostor = dataclasses.replace(request(pushed, cache, keys.trust), name="acme/impostor")
    with pytest.raises(VerificationFailed) as refused:
        pull_model(impostor)
    assert refused.value.verification.first is not None
    assert refused.value.verification.first.kind == "signature"
    assert not (cache / "by-name" / "acme" / "impostor" / "v1").exists()
    assert pull_model(request(pushed, cache, keys.trust)).was_cached  # the trusted one is intact


def _push_blake2(model: Path, keys: Keys, url: RegistryUrl, name: str) -> RegistryManifest:
    signature = model.with_name(model.name + ".b2.sig")
    sign_model(model, keys.private, signature=signature, hash_algorithm="blake2")
    return push_model(make_client(), model, url, name, "v1", signature=signature).manifest


def _rewrite_manifest(url: RegistryUrl, name: str, files: list[FileEntry]) -> None:
    client = make_client()
    manifest, _ = read_revision(client, url, name, "v1")
    changed = manifest.model_copy(update={"files": tuple(files), "digest": model_digest(files)})
    key = revision_key(url, name, "v1", "manifest.json")
    client.put_object(Bucket=url.bucket, Key=key, Body=changed.model_dump_json().encode())


def test_a_blake2_model_is_never_stored_under_another_sha256_than_its_own(
    signed_model: Path, keys: Keys, registry: str, tmp_path: Path
) -> None:
    """A blake2 signature does not list SHA-256s: a manifest that labels the right bytes with
    another SHA-256 had them verified and stored under that content address, where a later
    pull of the model that address belongs to would take them, unhashed."""
    url = RegistryUrl.parse(registry)
    manifest = _push_blake2(signed_model, keys, url, "acme/b2")
    fake = hashlib.sha256(b"another model's shard").hexdigest()
    entry = next(f for f in manifest.files if f.path == SHARD)
    body = (signed_model / SHARD).read_bytes()
    make_client().put_object(Bucket=url.bucket, Key=blob_key(url, fake), Body=body)
    files = [f.model_copy(update={"sha256": fake}) if f == entry else f for f in manifest.files]
    _rewrite_manifest(url, "acme/b2", files)
    cache = tmp_path / "c"
    b2 = dataclasses.replace(request(url, cache, keys.trust), name="acme/b2")
    with pytest.raises(VerificationFailed) as refused:
        pull_model(b2)
    assert refused.value.verification.first is not None
    assert refused.value.verification.first.path == SHARD
    assert not WeightCache(cache).model_dir(model_digest(files)).exists()


def test_a_blake2_manifest_naming_cached_content_is_refused_not_linked(
    pushed: RegistryUrl, signed_model: Path, keys: Keys, tmp_path: Path
) -> None:
    """The same file names, other bytes signed with blake2, and a manifest listing the cached
    model's SHA-256s: the cache hit linked the cached model's bytes under the blake2 revision,
    without hashing them."""
    cache = tmp_path / "c"
    cached = pull_model(request(pushed, cache, keys.trust))
    other = tmp_path / "other"
    shutil.copytree(signed_model, other)
    Tampering("byte", "altered", SHARD).apply(other)
    _push_blake2(other, keys, pushed, "acme/b2")
    tiny, _ = read_revision(make_client(), pushed, NAME, "v1")
    _rewrite_manifest(pushed, "acme/b2", list(tiny.files))
    b2 = dataclasses.replace(request(pushed, cache, keys.trust), name="acme/b2")
    with pytest.raises(VerificationFailed) as refused:
        pull_model(b2)
    assert refused.value.verification.first is not None
    assert refused.value.verification.first.path == SHARD
    assert not verify_model(cache / "by-name" / "acme" / "b2" / "v1", keys.trust).ok
    assert pull_model(request(pushed, cache, keys.trust)).digest == cached.digest


def test_leftovers_of_a_crash_in_the_partial_directory_do_not_fail_the_next_pull(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path
) -> None:
    """A pull killed between writing its signature's temporary file and renaming it leaves
    `.model.sig.<pid>.tmp` behind: the next pull installed the model, then failed removing the
    partial directory (rmdir: not empty)."""
    cache = tmp_path / "c"
    manifest, _ = read_revision(make_client(), pushed, NAME, "v1")
    partial = WeightCache(cache).partial_dir(manifest.digest)
    partial.mkdir(parents=True)
    (partial / ".model.sig.999999.tmp").write_bytes(b"torn")
    result = pull_model(request(pushed, cache, keys.trust))
    assert result.verification is not None and result.verification.ok
    assert not partial.exists()


@pytest.mark.parametrize(
    "error",
    [lambda: botocore.exceptions.ResponseStreamingError(error="Connection broken (test)"),
     lambda: botocore.exceptions.ReadTimeoutError(endpoint_url="None")],
    ids=["dropped", "stalled"],
)  # fmt: skip
def test_a_transfer_that_breaks_says_the_pull_resumes(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path, error: Callable[[], Exception]
) -> None:
    """A connection that drops or stalls mid-part (what botocore raises: the body's read fails)
    ended the pull with 'S3 client error: An error occurred while reading from response
    stream ...' or 'Read timeout on endpoint URL: "None"': nothing said the finished parts were
    kept, nor to run the pull again."""
    cache = tmp_path / "c"
    breaking = CountingClient(make_client(), fail_after_bytes=3 * PART, error=error)
    with pytest.raises(WeightsError) as broke:
        pull_model(request(pushed, cache, keys.trust, workers=1), breaking)
    message = str(broke.value)
    assert f"{NAME}@v1" in message and os.environ["AWS_ENDPOINT_URL"] in message
    assert "run the same command again to resume" in message
    manifest, _ = read_revision(make_client(), pushed, NAME, "v1")
    ends = itertools.accumulate(
        p.num_bytes for p in plan_parts([(f, "") for f in manifest.files], PART)
    )
    kept = max(end for end in ends if end <= 3 * PART)  # one worker: the parts before the break
    result = pull_model(request(pushed, cache, keys.trust, workers=1))
    assert result.resumed_bytes == kept and result.fetched_bytes == result.total_bytes - kept
    assert result.verification is not None and result.verification.ok


def test_a_refused_registry_copy_says_what_helps(
    pushed: RegistryUrl, keys: Keys, tmp_path: Path, signed_model: Path, tampering: Tampering
) -> None:
    """A pull refused over the registry's own copy advised `pull --verify-cached` ('moves the
    bad copy aside and fetches a fresh one'): nothing was cached, and that fresh copy was the
    one just refused. It says nothing was installed, that a pull again fetches the refused
    files afresh (a transfer can corrupt them), and what repairs the registry."""
    _tamper_registry(pushed, tampering, signed_model)
    with pytest.raises(VerificationFailed) as raised:
        pull_model(request(pushed, tmp_path / "c", keys.trust))
    message = str(raised.value)
    assert "--verify-cached" not in message and "Nothing was installed" in message
    assert "push the signed original again, as a new revision" in message
