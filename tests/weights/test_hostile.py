"""What a hostile reviewer tries on verification: every hash the signer offers, signatures
whose statement asks for hashing that cannot be done, special files where a signature or a
model file should be. Each is refused with a `Problem` (never a traceback, never a hang)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.weights.conftest import Keys, Tampering
from tests.weights.tiny_model import write_tiny_model

from inhouse.weights import registry as registry_module
from inhouse.weights.errors import WeightsError
from inhouse.weights.registry import push_model
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import HashAlgorithm, default_signature_path, sign_model
from inhouse.weights.verdict import Verification
from inhouse.weights.verify import check_signature, verify_model

TIMEOUT_S = 30
ONE_SHARD = "model-00001-of-00001.safetensors"


@pytest.fixture
def small_model(tmp_path: Path, keys: Keys) -> Path:
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    sign_model(model, keys.private)
    return model


def verify_within(model: Path, keys: Keys, signature: Path | None = None) -> Verification:
    """`verify_model` in a thread, failing the test (not hanging it) if it never returns."""
    results: list[Verification | BaseException] = []

    def run() -> None:
        try:
            results.append(verify_model(model, keys.trust, signature))
        except BaseException as exc:  # handed to the test
            results.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), f"verify_model still running after {TIMEOUT_S} s"
    (result,) = results
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("algorithm", ["sha256", "blake2", "blake3"])
def test_every_hash_the_signer_offers_verifies(
    tmp_path: Path, keys: Keys, algorithm: HashAlgorithm
) -> None:
    """`sign --hash blake2` writes `hash_type: blake2b` (the digest's name), which the library's
    hashing configuration does not accept by that name: verification raised a ValueError."""
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    sign_model(model, keys.private, hash_algorithm=algorithm)
    assert verify_model(model, keys.trust).ok
    assert check_signature(default_signature_path(model), keys.trust).ok
    Tampering("byte", "altered", ONE_SHARD).apply(model)
    (problem,) = verify_model(model, keys.trust).problems
    assert (problem.kind, problem.path) == ("altered", ONE_SHARD)


def _rewrite_serialization(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def rewrite(signature: Path) -> None:
        bundle = json.loads(signature.read_text())
        payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
        change(payload["predicate"]["serialization"])
        encoded = base64.b64encode(json.dumps(payload).encode()).decode()
        bundle["dsseEnvelope"]["payload"] = encoded
        signature.write_text(json.dumps(bundle))

    return rewrite


IMPOSSIBLE_HASHING = {
    "no hash_type": _rewrite_serialization(lambda s: s.pop("hash_type")),
    "hash_type md5": _rewrite_serialization(lambda s: s.update(hash_type="md5")),
    "shards without a size": _rewrite_serialization(lambda s: s.update(method="shards")),
    "shard size not a number": _rewrite_serialization(
        lambda s: s.update(method="shards", shard_size="x")
    ),
    "shard size 0": _rewrite_serialization(lambda s: s.update(method="shards", shard_size=0)),
}


@pytest.mark.parametrize("rewrite", IMPOSSIBLE_HASHING.values(), ids=IMPOSSIBLE_HASHING.keys())
def test_a_statement_asking_for_impossible_hashing_is_a_bad_signature(
    small_model: Path, keys: Keys, rewrite: Callable[[Path], None]
) -> None:
    """The statement is read (untrusted) to configure hashing before the library checks the
    envelope: a KeyError or ValueError from configuring escaped as a traceback."""
    signature = default_signature_path(small_model)
    rewrite(signature)
    for result in (verify_model(small_model, keys.trust), check_signature(signature, keys.trust)):
        (problem,) = result.problems
        assert (problem.kind, problem.path) == ("signature", str(signature))
        assert "corrupt or was altered" in problem.detail
    with pytest.raises(WeightsError, match="corrupt or was altered"):  # before any S3 call
        push_model(None, small_model, RegistryUrl.parse("s3://b/p"), "acme/m", "v1")


def test_a_fifo_where_the_signature_should_be_is_refused_not_waited_on(
    small_model: Path, keys: Keys
) -> None:
    """Reading a FIFO with no writer blocks forever: verify hung."""
    signature = default_signature_path(small_model)
    signature.unlink()
    os.mkfifo(signature)
    try:
        (problem,) = verify_within(small_model, keys).problems
    finally:  # release a reader blocked on the FIFO (the old code), so the thread ends
        with contextlib.suppress(OSError):  # no reader: nothing blocked
            os.close(os.open(signature, os.O_WRONLY | os.O_NONBLOCK))
    assert (problem.kind, problem.path) == ("signature", str(signature))
    assert "not a regular file" in problem.detail


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


def _loop(path: Path) -> None:
    os.symlink(path.name, path)


def _outside(path: Path) -> None:
    os.symlink("/etc", path)


SPECIAL_FILES = {"fifo": _fifo, "socket": _socket, "symlink loop": _loop, "symlink out": _outside}


@pytest.mark.parametrize("make", SPECIAL_FILES.values(), ids=SPECIAL_FILES.keys())
def test_special_files_in_the_model_are_refused_without_reading_them(
    small_model: Path, keys: Keys, make: Callable[[Path], None]
) -> None:
    make(small_model / "odd")
    (problem,) = verify_within(small_model, keys).problems
    assert (problem.kind, problem.path) == ("unreadable", str(small_model))
    assert "odd" in problem.detail


def test_pushing_an_empty_directory_says_so(tmp_path: Path, keys: Keys, registry: str) -> None:
    """An empty directory signs (a statement of no files), but the registry's manifest needs a
    file: push died with pydantic's ValidationError traceback."""
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".gitattributes").write_text("*.safetensors filter=lfs\n")  # git metadata: not a file
    sign_nothing(empty, keys)  # `sign_model` refuses it: signed by another tool
    with pytest.raises(WeightsError, match="holds no files"):
        push_model(make_client(), empty, RegistryUrl.parse(registry), "acme/m", "v1")


@pytest.mark.parametrize(
    "option",
    [["--workers", "0"], ["--part-mib", "0"], ["--limit-rate", "-1"], ["--digest", "ab" * 32]],
)
def test_pull_options_out_of_range_are_usage_errors(
    signed_model: Path, keys: Keys, registry: str, tmp_path: Path, option: list[str]
) -> None:
    """They reached ThreadPoolExecutor's ValueError or an assert: a traceback, after the
    signature had been fetched and checked."""
    push_model(make_client(), signed_model, RegistryUrl.parse(registry), "acme/tiny", "v1")
    cache = str(tmp_path / "c")
    argv = [sys.executable, "-m", "inhouse.cli.weights", "pull", "acme/tiny@v1", "--registry",
            registry, "--cache", cache, "--public-key", str(keys.public), *option]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert option[0] in done.stderr and "Traceback" not in done.stderr


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.asked: list[int | None] = []
        self.closed = False

    def read(self, amt: int | None = None) -> bytes:
        self.asked.append(amt)
        return self.data if amt is None else self.data[:amt]

    def close(self) -> None:
        self.closed = True


class _OneObject:
    """An S3 client whose every object is `data`, with `length` as its ContentLength."""

    def __init__(self, data: bytes, length: int | None) -> None:
        self.body = _Body(data)
        self.length = length

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # boto3's argument names
        response: dict[str, Any] = {"Body": self.body}
        if self.length is not None:
            response["ContentLength"] = self.length
        return response


@pytest.mark.parametrize("announced", [True, False], ids=["content-length", "no-length"])
def test_a_manifest_past_the_limit_is_refused_without_reading_it_whole(
    monkeypatch: pytest.MonkeyPatch, announced: bool
) -> None:
    """The registry is not trusted: a huge object where a manifest or signature belongs would
    have been read whole into the memory of every engine pod's init container."""
    monkeypatch.setattr(registry_module, "MAX_METADATA_BYTES", 1024)
    data = b"{" + b" " * 4096 + b"}"
    client = _OneObject(data, len(data) if announced else None)
    url = RegistryUrl.parse("s3://bucket/models")
    with pytest.raises(WeightsError, match=r"s3://bucket/models/.*manifest\.json is .*over the"):
        registry_module.read_revision(client, url, "tiny", "v1")
    assert client.body.closed
    assert client.body.asked == ([] if announced else [1025])


@pytest.mark.parametrize(
    "name",
    ["evil\n  all other files verified, ok", "model\u202enosnetsafes.py", "tab\there"],
    ids=["newline", "bidi-override", "tab"],
)
def test_a_file_name_cannot_write_lines_of_the_refusal(
    signed_model: Path, keys: Keys, name: str
) -> None:
    """A file named with a newline printed as two lines of the refusal, the second one the
    file's own text ("all other files verified, ok"); a right-to-left override showed
    `model\u202enosnetsafes.py` as `model[...].safetensors`. Names that are not printable are
    shown escaped, so the operator sees (and can remove) the real file."""
    from inhouse.weights.messages import describe_failure

    (signed_model / name).write_text("x")
    result = verify_model(signed_model, keys.trust)
    assert result.first is not None and result.first.path == name
    message = describe_failure(result)
    assert name not in message and repr(name) in message
    assert message.splitlines()[1].startswith("  extra: ")
    assert not any(line.startswith("  all other") for line in message.splitlines())


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_signing_refuses_a_private_key_others_can_read(
    signed_model: Path, keys: Keys, tmp_path: Path, mode: int
) -> None:
    """Anyone who can read the release key can sign weights every engine will serve; keygen
    writes it 0600, but a copy (a CI secret mounted 0644, `cp` under a loose umask) signed
    without a word. Refused, as ssh refuses such a key, naming the file and the fix."""
    loose = tmp_path / "loose.priv"
    loose.write_bytes(keys.private.read_bytes())
    loose.chmod(mode)
    target = tmp_path / "out.sig"
    with pytest.raises(WeightsError, match=r"loose\.priv.*chmod 600"):
        sign_model(signed_model, loose, signature=target)
    assert not target.exists()


@pytest.mark.parametrize("spec", ["acme/tiny@", "@v1"], ids=["no-revision", "no-name"])
def test_a_pull_of_an_empty_or_malformed_name_or_revision_is_a_usage_error(
    signed_model: Path, keys: Keys, registry: str, tmp_path: Path, spec: str
) -> None:
    """`pull acme/tiny@$REV` with $REV unset pulled the newest revision, exit 0: a script that
    pins a revision silently served whatever was pushed last. '@v1' (no name) read the bucket's
    models/v1/ and said the manifest there described another model."""
    url = RegistryUrl.parse(registry)
    push_model(make_client(), signed_model, url, "acme/tiny", "v1")
    push_model(make_client(), signed_model, url, "acme/tiny", "v2")
    cache = tmp_path / "c"
    argv = [sys.executable, "-m", "inhouse.cli.weights", "pull", spec, "--registry", registry,
            "--cache", str(cache), "--public-key", str(keys.public)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert repr(spec) in done.stderr and "NAME@REV" in done.stderr
    assert not (cache / "by-name").exists()


@pytest.mark.parametrize("value", ["five", "-1", "2.5", "\u00b2", "\u0663"])
def test_a_bad_aws_max_attempts_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """`AWS_MAX_ATTEMPTS=five` (or -1, or 2.5) was an int() ValueError (or botocore's)
    traceback from every registry command; a superscript two passed `isdigit()` and was the
    same traceback, and an Arabic-Indic three was taken as 3 where AWS's tools refuse it."""
    for name, setting in {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                          "AWS_MAX_ATTEMPTS": value}.items():  # fmt: skip
        monkeypatch.setenv(name, setting)
    with pytest.raises(WeightsError, match=f"AWS_MAX_ATTEMPTS={value!r}.*whole number"):
        make_client()


def test_ls_never_prints_a_manifests_control_characters(signed_model: Path, registry: str) -> None:
    """A manifest's licence and push time are the registry's words (unsigned, unchecked):
    `ls` printed them raw, so a newline wrote a row of its own ('acme/fixed@v9 ... Apache-2.0')
    and escape sequences reached the operator's terminal (colours, a cleared screen, a title)."""
    from inhouse.weights.registry import read_revision, revision_key

    url = RegistryUrl.parse(registry)
    push_model(make_client(), signed_model, url, "acme/tiny", "v1")
    client = make_client()
    manifest, _ = read_revision(client, url, "acme/tiny", "v1")
    forged = "\n" + f"{'acme/fixed@v9':48} {'0.01 GB':>10} {7:5}  {'2099-01-01':20}  Apache-2.0"
    hostile = manifest.model_copy(
        update={"license": "MIT\x1b[2J\x1b]0;pwned\x07" + forged, "pushed_at": "2025\r\x1b[31m"}
    )
    key = revision_key(url, "acme/tiny", "v1", "manifest.json")
    client.put_object(Bucket=url.bucket, Key=key, Body=hostile.model_dump_json().encode())
    argv = [sys.executable, "-m", "inhouse.cli.weights", "ls", "--registry", registry]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout and "\x07" not in done.stdout
    rows = done.stdout.splitlines()
    assert len(rows) == 2 and rows[1].startswith("acme/tiny@v1")


def sign_nothing(empty: Path, keys: Keys) -> Path:
    """A signature of an empty directory, as model-signing's own API makes one."""
    from model_signing import hashing, signing

    signature = default_signature_path(empty)
    config = signing.Config().use_elliptic_key_signer(private_key=keys.private)  # type: ignore[no-untyped-call]
    hashes = hashing.Config().use_file_serialization()  # type: ignore[no-untyped-call]
    config.set_hashing_config(hashes).sign(empty, signature)
    return signature


class _NoRegistry:
    """An S3 client that fails the test on any call: a refusal must come before the upload."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"push reached the registry ({name}) before refusing")


@pytest.mark.parametrize("algorithm", ["sha256", "blake2", "blake3"])
def test_push_refuses_a_file_altered_after_signing_whatever_the_hash(
    tmp_path: Path,
    keys: Keys,
    algorithm: HashAlgorithm,
    tampering: Tampering,
    request: pytest.FixtureRequest,
) -> None:
    # With --hash blake2 or blake3 push compared only the file names: a shard altered after
    # signing was uploaded, and every node then refused the revision, which cannot be pushed
    # over. Push refuses it whatever the hash, naming the file, and stores nothing: a file
    # added or removed before any upload; with blake2 or blake3 an altered one too (the
    # blobs' SHA-256s need a read before the upload); with SHA-256 (the signature names the
    # blobs) the one read hashes what it uploads, and the upload is never committed.
    model = write_tiny_model(tmp_path / "m", num_shards=2, shard_bytes=4096)
    sign_model(model, keys.private, hash_algorithm=algorithm)
    tampering.apply(model)
    if algorithm != "sha256" or tampering.kind != "altered":
        url = RegistryUrl.parse("s3://models/prod")
        with pytest.raises(WeightsError, match=f"{tampering.kind}: {tampering.path}"):
            push_model(_NoRegistry(), model, url, "acme/tiny", "v1")
        return
    url = RegistryUrl.parse(request.getfixturevalue("registry"))
    client = make_client()
    with pytest.raises(WeightsError, match=f"{tampering.kind}: {tampering.path}"):
        push_model(client, model, url, "acme/tiny", "v1")
    assert client.list_objects_v2(Bucket=url.bucket).get("KeyCount", 0) == 0
    assert client.list_multipart_uploads(Bucket=url.bucket).get("Uploads", []) == []


def test_signing_a_directory_with_no_files_is_refused(tmp_path: Path, keys: Keys) -> None:
    # An empty directory (a mount point whose volume was not mounted) was signed, and its
    # signature then verified any empty directory ("verified: 0 file(s)"), exit 0.
    empty = tmp_path / "models" / "tiny"
    (empty / ".git").mkdir(parents=True)
    (empty / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # git metadata aside
    with pytest.raises(WeightsError, match=r"no files .*is it the model's directory"):
        sign_model(empty, keys.private)
    assert not default_signature_path(empty).exists()
    assert not list(empty.parent.glob(".*.tmp"))


def test_a_signature_that_covers_no_files_verifies_nothing(tmp_path: Path, keys: Keys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    signature = sign_nothing(empty, keys)
    other = tmp_path / "other-empty"
    other.mkdir()
    result = verify_model(other, keys.trust, signature)
    assert not result.ok
    assert result.first is not None and result.first.kind == "signature"
    assert "covers no files" in result.first.detail


@pytest.mark.parametrize("planted", ["key.pub", "key.priv", "ca.pem", "signing.pem"])
def test_keygen_never_writes_through_a_link_planted_where_a_key_goes(
    tmp_path: Path, planted: str
) -> None:
    # keygen checked for existing keys with exists(), which follows links: a dangling link
    # planted as key.pub (a keys directory others can write to) passed, and the public key
    # (or a certificate) was written wherever the link pointed; one as key.priv died with a
    # FileExistsError traceback after nothing was said.
    from inhouse.weights.trust import keygen

    out = tmp_path / "keys"
    out.mkdir()
    target = tmp_path / "elsewhere" / "planted"
    target.parent.mkdir()
    (out / planted).symlink_to(target)
    with pytest.raises(WeightsError, match=f"{planted} already exists"):
        keygen(out, with_certificate=True)
    assert not target.exists()
    assert sorted(p.name for p in out.iterdir()) == [planted]


def test_signing_never_writes_through_a_link_planted_at_its_temporary_file(
    tmp_path: Path, keys: Keys
) -> None:
    # The signature was written first to `.MODEL.sig.<pid>.tmp` beside the model: a name anyone
    # who can write there could guess, and a link planted at it had the signature written
    # wherever it pointed (then replaced by the signature, the target kept what was written).
    model = write_tiny_model(tmp_path / "tiny", num_shards=1, shard_bytes=4096)
    target = tmp_path / "elsewhere"
    (tmp_path / f".tiny.sig.{os.getpid()}.tmp").symlink_to(target)
    signature = sign_model(model, keys.private)
    assert not target.exists()
    assert verify_model(model, keys.trust, signature).ok
