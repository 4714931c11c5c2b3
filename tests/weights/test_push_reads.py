"""How often push reads each model file, and that one read is as strict as two: a file that
changes while it is pushed never reaches the registry as anything but the signed bytes.

Reads are counted in bytes per file by wrapping `open` (model-signing's hashing and the
uploader both open the files by path), on a real S3 server (SeaweedFS)."""

from __future__ import annotations

import builtins
import hashlib
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from model_signing import hashing, signing
from tests.weights.conftest import SHARD, Keys
from tests.weights.tiny_model import write_tiny_model

from inhouse.weights import file_pass
from inhouse.weights.errors import VerificationFailed, WeightsError
from inhouse.weights.file_pass import Digester, list_model_files, read_file
from inhouse.weights.registry import blob_key, push_model
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import (
    configure_hashing,
    default_signature_path,
    new_hashing,
    read_statement,
    sign_model,
)

SHARD_BYTES = 1 << 20  # shard serialization: 1 MiB shards, so the 2 MiB weight files have 3


def sign(model: Path, keys: Keys, kind: str) -> None:
    """Sign `model` as `kind`: `files-ALGORITHM` (our `sign`) or `shards-sha256` (the
    library's own API: `inhouse weights sign` does not shard)."""
    method, algorithm = kind.split("-")
    if method == "files":
        sign_model(model, keys.private, hash_algorithm=algorithm)  # type: ignore[arg-type]
        return
    config = signing.Config().use_elliptic_key_signer(private_key=keys.private)  # type: ignore[no-untyped-call]
    hashes = hashing.Config().use_shard_serialization(shard_size=SHARD_BYTES)  # type: ignore[no-untyped-call]
    config.set_hashing_config(hashes).sign(model, default_signature_path(model))


class ReadCounter:
    """`open` for files under `root`, counting the bytes read from each; `on_read(path, total)`
    runs after each read (a test alters the file there)."""

    def __init__(self, root: Path, on_read: Any = None) -> None:
        self.root = str(root) + os.sep
        self.bytes_read: Counter[str] = Counter()
        self.on_read = on_read
        self._open = builtins.open

    def __call__(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = self._open(file, mode, *args, **kwargs)
        name = str(file) if isinstance(file, str | os.PathLike) else ""
        if name.startswith(self.root) and "r" in mode and "+" not in mode:
            return _Counted(handle, self, name[len(self.root) :])
        return handle

    def count(self, path: str, data: bytes | int | None) -> None:
        self.bytes_read[path] += data if isinstance(data, int) else len(data or b"")
        if self.on_read is not None:
            self.on_read(path, self.bytes_read[path])


class _Counted:
    def __init__(self, handle: Any, counter: ReadCounter, path: str) -> None:
        self._handle, self._counter, self._path = handle, counter, path

    def read(self, *args: Any) -> bytes:
        data: bytes = self._handle.read(*args)
        self._counter.count(self._path, data)
        return data

    def readinto(self, buffer: Any) -> int:
        num: int = self._handle.readinto(buffer)
        self._counter.count(self._path, num)
        return num

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def reads_per_file(counter: ReadCounter, model: Path) -> dict[str, float]:
    sizes = {f.path: f.size for f in list_model_files(model)}
    return {path: counter.bytes_read[path] / size for path, size in sizes.items() if size}


# (signature, reads of each file in a first push, reads in a push whose blobs are there)
READS = [("files-sha256", 1, 1), ("files-blake2", 2, 1), ("shards-sha256", 2, 1)]


@pytest.mark.parametrize(("kind", "first", "again"), READS, ids=[r[0] for r in READS])
def test_push_reads_each_file_once_where_the_signature_names_the_blobs(
    tmp_path: Path,
    keys: Keys,
    registry: str,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    first: int,
    again: int,
) -> None:
    """Push hashed every file with SHA-256 (the blobs' names), then, for any other signature,
    again as the signer did, then uploaded it, which read it twice more over plain HTTP
    (botocore reads a part to sign its payload, then to send it): 3 reads of each file with a
    SHA-256 signature, 4 with blake2 or shards. Now a SHA-256 signature's digests name the
    blobs, and each file is hashed while it is uploaded: one read. Others need the SHA-256
    before the upload (a blob the registry has is not uploaded): one read hashes both, and a
    file uploaded is read once more, hashed again as it goes up."""
    model = write_tiny_model(tmp_path / "model")
    sign(model, keys, kind)
    url, client = RegistryUrl.parse(registry), make_client()
    for revision, expected in (("v1", first), ("v2", again)):
        counter = ReadCounter(model)
        monkeypatch.setattr(builtins, "open", counter)
        push_model(client, model, url, "acme/tiny", revision)
        monkeypatch.setattr(builtins, "open", counter._open)
        assert reads_per_file(counter, model) == dict.fromkeys(
            reads_per_file(counter, model), float(expected)
        ), revision


@pytest.mark.parametrize("kind", ["files-sha256", "files-blake2", "shards-sha256"])
@pytest.mark.parametrize("when", ["mid-read", "after-read"])
def test_a_file_altered_while_it_is_pushed_never_reaches_the_registry(
    tmp_path: Path,
    keys: Keys,
    registry: str,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    when: str,
) -> None:
    """A writer flips the last byte of a weight file once push has read some of it, or all
    of it once. Push hashed it, then uploaded it by reading it again: altered after the hash,
    its altered bytes were stored under the signed file's SHA-256 and the revision written,
    and every node then refused it. Now the bytes uploaded are the bytes hashed: altered
    before push read them, it is refused and nothing is stored (no object, no upload left
    open); altered after its one read (a SHA-256 signature), the signed bytes are stored."""
    model = write_tiny_model(tmp_path / "model")
    sign(model, keys, kind)
    original = (model / SHARD).read_bytes()
    sha256 = hashlib.sha256(original).hexdigest()
    trigger = 1 if when == "mid-read" else len(original)
    monkeypatch.setattr(file_pass, "READ_BYTES", 256 << 10)  # the file is read in 8 reads

    def alter(path: str, total: int) -> None:
        if path == SHARD and total >= trigger and (model / SHARD).read_bytes() == original:
            with counter._open(model / SHARD, "r+b") as handle:
                handle.seek(len(original) - 1)
                handle.write(bytes([original[-1] ^ 1]))

    counter = ReadCounter(model, alter)
    url, client = RegistryUrl.parse(registry), make_client()
    monkeypatch.setattr(builtins, "open", counter)
    try:
        push_model(client, model, url, "acme/tiny", "v1")
    except WeightsError as exc:
        assert f"altered: {SHARD}" in str(exc)
        assert kind != "files-sha256" or when == "mid-read", "one read: the signed bytes"
        assert client.list_objects_v2(Bucket=url.bucket).get("KeyCount", 0) == 0
        assert client.list_multipart_uploads(Bucket=url.bucket).get("Uploads", []) == []
        return
    finally:
        monkeypatch.setattr(builtins, "open", counter._open)
    assert kind == "files-sha256" and when == "after-read", "the altered file was pushed"
    blob = client.get_object(Bucket=url.bucket, Key=blob_key(url, sha256))["Body"].read()
    assert blob == original


def test_a_failed_upload_leaves_nothing_open(
    signed_model: Path, registry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload that fails part-way (the server refuses a part) is aborted with every other:
    an open multipart upload keeps its parts on the server until someone aborts it."""
    url, client = RegistryUrl.parse(registry), make_client()
    real = client.upload_part

    def upload_part(**kwargs: Any) -> Any:
        if kwargs["Key"].endswith(hashlib.sha256((signed_model / SHARD).read_bytes()).hexdigest()):
            raise OSError("the server went away (test)")
        return real(**kwargs)

    monkeypatch.setattr(client, "upload_part", upload_part)
    with pytest.raises(OSError, match="went away"):
        push_model(client, signed_model, url, "acme/tiny", "v1")
    assert client.list_objects_v2(Bucket=url.bucket).get("KeyCount", 0) == 0
    assert client.list_multipart_uploads(Bucket=url.bucket).get("Uploads", []) == []


def write_awkward_model(model: Path) -> Path:
    """Files that test the edges of the library's walk and shards: empty, exactly one shard,
    one byte over, nested, hidden, and git metadata (ignored)."""
    write_tiny_model(model, num_shards=1, shard_bytes=SHARD_BYTES)
    (model / "empty.bin").write_bytes(b"")
    (model / "exact.bin").write_bytes(os.urandom(SHARD_BYTES))
    (model / "sub" / "deeper").mkdir(parents=True)
    (model / "sub" / "deeper" / "over.bin").write_bytes(os.urandom(SHARD_BYTES + 1))
    (model / ".hidden").write_text("kept")
    (model / ".git").mkdir()
    (model / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (model / ".gitattributes").write_text("*.bin filter=lfs\n")
    return model


@pytest.mark.parametrize(
    "kind",
    ["files-sha256", "files-blake2", "files-blake3", "shards-sha256", "shards-blake2"],
)
def test_one_read_finds_the_digests_and_files_the_library_does(
    tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """The digests computed from the bytes push reads (model-signing hashes from paths, so a
    read shared with the uploader cannot be its) must be the library's, resource by resource;
    reads of 300 KiB cross the 1 MiB shard boundaries mid-read."""
    model = write_awkward_model(tmp_path / "model")
    method, algorithm = kind.split("-")
    config = signing.Config().use_elliptic_key_signer(private_key=keys.private)  # type: ignore[no-untyped-call]
    hashes = hashing.Config()  # type: ignore[no-untyped-call]
    if method == "shards":
        hashes.use_shard_serialization(hashing_algorithm=algorithm, shard_size=SHARD_BYTES)
    else:
        hashes.use_file_serialization(hashing_algorithm=algorithm)
    config.set_hashing_config(hashes).sign(model, default_signature_path(model))
    statement = read_statement(default_signature_path(model))
    library = configure_hashing(new_hashing(), statement, []).hash(model)
    expected = {rd.identifier: rd.digest.digest_hex for rd in library.resource_descriptors()}
    assert expected == statement.resources
    monkeypatch.setattr(file_pass, "READ_BYTES", 300 << 10)
    files = list_model_files(model)
    assert {f.path for f in files} == {n.split(":")[0] for n in expected} | {"empty.bin"}
    found: dict[str, str] = {}
    for f in files:
        digests = read_file(model / f.path, Digester(statement, f.path))
        assert digests.sha256 == hashlib.sha256((model / f.path).read_bytes()).hexdigest()
        assert sorted(digests.resources) == sorted(file_pass.resource_names(statement, f))
        found.update(digests.resources)
    assert found == expected


def test_the_walk_refuses_what_the_library_refuses(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "model", num_shards=1, shard_bytes=4096)
    (model / ".git").mkdir()
    (model / ".git" / "link").symlink_to(model / "config.json")
    with pytest.raises(ValueError, match="symlink"):
        list_model_files(model)
    (model / ".git" / "link").unlink()
    os.mkfifo(model / "fifo")
    with pytest.raises(ValueError, match="special file"):
        list_model_files(model)


@pytest.mark.parametrize("kind", ["files-sha256", "shards-sha256"])
def test_a_model_pushed_in_parts_pulls_and_verifies(
    tmp_path: Path, keys: Keys, registry: str, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Blobs of many parts, of one, and an empty one (no part: an empty object) hold exactly
    the files' bytes, and the revision pulls and verifies."""
    from inhouse.weights import blob_upload
    from inhouse.weights.pull import PullRequest, pull_model

    model = write_awkward_model(tmp_path / "model")
    (model / "big.bin").write_bytes(os.urandom((11 << 20) + 1))
    sign(model, keys, kind)
    monkeypatch.setattr(blob_upload, "PART_BYTES", 5 << 20)  # S3's least: big.bin in 3 parts
    url, client = RegistryUrl.parse(registry), make_client()
    manifest = push_model(client, model, url, "acme/tiny", "v1").manifest
    for entry in manifest.files:
        blob = client.get_object(Bucket=url.bucket, Key=blob_key(url, entry.sha256))["Body"]
        assert blob.read() == (model / entry.path).read_bytes(), entry.path
    assert {f.path for f in manifest.files} >= {"big.bin", "sub/deeper/over.bin"}
    result = pull_model(PullRequest(url, "acme/tiny", "v1", tmp_path / "cache", keys.trust))
    assert result.verification is not None and result.verification.ok
    # A shard signature cannot list the empty file (no shard): it is pulled all the same.
    assert (result.path / "empty.bin").read_bytes() == b""


@pytest.mark.parametrize("size", [0, 1, (16 << 20) * 10_000, (16 << 20) * 10_000 + 1, 5 * 10**12])
def test_parts_stay_within_what_s3_takes(size: int) -> None:
    """At least 5 MiB (the last part aside), at most 10,000 parts, whole MiB."""
    from inhouse.weights.blob_upload import part_bytes

    part = part_bytes(size)
    assert part >= 16 << 20 and part % (1 << 20) == 0 and -(-size // part) <= 10_000


def test_a_refused_file_stops_the_push_before_the_files_after_it(
    tmp_path: Path, keys: Keys, registry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a SHA-256 signature an altered file is found as it is uploaded: the files not yet
    started are then never read nor sent (one file at a time here, so which is exact)."""
    from inhouse.weights import registry as registry_module

    model = write_tiny_model(tmp_path / "model", num_shards=4, shard_bytes=4096)
    sign(model, keys, "files-sha256")
    names = [f.path for f in list_model_files(model)]
    altered = "model-00002-of-00004.safetensors"
    (model / altered).write_bytes((model / altered).read_bytes()[:-1] + b"!")
    monkeypatch.setattr(registry_module, "NUM_UPLOAD_FILES", 1)
    counter = ReadCounter(model)
    monkeypatch.setattr(builtins, "open", counter)
    with pytest.raises(WeightsError, match=f"altered: {altered}"):
        push_model(make_client(), model, RegistryUrl.parse(registry), "acme/tiny", "v1")
    monkeypatch.setattr(builtins, "open", counter._open)
    assert sorted(counter.bytes_read) == names[: names.index(altered) + 1]


@pytest.mark.parametrize(
    ("kind", "entry", "refused"),
    [
        ("shards-sha256", ("empty.bin", 0, hashlib.sha256(b"").hexdigest()), False),
        ("shards-sha256", ("planted.bin", 0, hashlib.sha256(b"x").hexdigest()), True),
        ("shards-sha256", ("planted.bin", 1, hashlib.sha256(b"x").hexdigest()), True),
        ("files-sha256", ("planted.bin", 0, hashlib.sha256(b"").hexdigest()), True),
    ],
)
def test_only_an_empty_file_passes_a_shard_signature_unlisted(
    tmp_path: Path, keys: Keys, registry: str, kind: str, entry: tuple[str, int, str],
    refused: bool,
) -> None:  # fmt: skip
    """A shard signature cannot list an empty file (it has no shard), so the manifest's entry
    for one passes the check before a fetch; an entry with any byte, or any entry a file
    signature does not list, is still refused before anything downloads."""
    from inhouse.weights.manifest import FileEntry
    from inhouse.weights.pull import PullRequest, _check_before_fetch

    model = write_tiny_model(tmp_path / "model", num_shards=1, shard_bytes=4096)
    sign(model, keys, kind)
    url = RegistryUrl.parse(registry)
    manifest = push_model(make_client(), model, url, "acme/tiny", "v1").manifest
    path, size, digest = entry
    forged = manifest.model_copy(
        update={"files": (*manifest.files, FileEntry(path=path, size=size, sha256=digest))}
    )
    signature = default_signature_path(model)
    request = PullRequest(url, "acme/tiny", "v1", tmp_path / "cache", keys.trust)
    if refused:
        with pytest.raises(VerificationFailed, match=r"planted\.bin"):
            _check_before_fetch(request, forged, signature, signature.read_bytes())
    else:
        _check_before_fetch(request, forged, signature, signature.read_bytes())


def test_a_pull_verifies_an_empty_file_under_shards_from_its_own_digests(
    tmp_path: Path, keys: Keys
) -> None:
    """The digests a pull computed as files landed stand for the directory when it holds
    exactly their files; an empty file, which has no shard, must not send verification back
    to hashing the whole model (a 140 GB read). Digests known wrong show which ran: taken as
    given, the wrong one is an altered file; rehashed, all would verify."""
    from inhouse.weights.signature import read_statement
    from inhouse.weights.verify import FileHashes, verify_model

    model = write_tiny_model(tmp_path / "model", num_shards=1, shard_bytes=4096)
    (model / "empty.bin").write_bytes(b"")
    sign(model, keys, "shards-sha256")
    hashes = FileHashes(model, read_statement(default_signature_path(model)))
    for path in sorted(p.name for p in model.iterdir() if p.is_file()):
        hashes.add(path)
    digests = hashes.digests()
    assert digests is not None and not any(n.startswith("empty.bin") for n in digests)
    assert verify_model(model, keys.trust, precomputed=digests).ok
    config = next(n for n in digests if n.startswith("config.json"))
    other = next(n for n in digests if not n.startswith("config.json"))
    wrong = {**digests, config: digests[other]}
    (problem,) = verify_model(model, keys.trust, precomputed=wrong).problems
    assert (problem.kind, problem.path) == ("altered", "config.json")
