"""The registry on a real S3 server (SeaweedFS): push, ls, immutability, dedup of unchanged
files, refusals before upload, and S3 errors worded for a person."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.weights.conftest import SHARD, Keys, Tampering
from tests.weights.s3_server import SeaweedS3

from inhouse.errors import SpecError
from inhouse.weights.errors import WeightsError
from inhouse.weights.manifest import FileEntry, model_digest, parse_manifest
from inhouse.weights.registry import (
    list_revisions,
    push_model,
    read_manifests,
    read_revision,
    resolve_revision,
)
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import sign_model

CATALOG_NAME = "meta-llama/Llama-3.1-8B-Instruct"


def test_push_then_ls_and_read(signed_model: Path, registry: str) -> None:
    url = RegistryUrl.parse(registry)
    client = make_client()
    result = push_model(client, signed_model, url, CATALOG_NAME, "v1")
    manifest = result.manifest
    sizes = {p.name: p.stat().st_size for p in signed_model.iterdir()}
    assert {f.path: f.size for f in manifest.files} == sizes
    assert result.uploaded_bytes == sum(sizes.values()) and result.reused_bytes == 0
    assert manifest.license == "Llama 3.1 Community License"  # from the catalog
    assert manifest.digest == model_digest(list(manifest.files))
    (listed,) = read_manifests(client, url)
    assert listed == manifest
    read, signature = read_revision(client, url, CATALOG_NAME, "v1")
    assert read == manifest
    assert signature == signed_model.with_name("tiny.sig").read_bytes()


def test_revisions_are_immutable_and_the_newest_is_the_default(
    signed_model: Path, registry: str
) -> None:
    url, client = RegistryUrl.parse(registry), make_client()
    push_model(client, signed_model, url, "acme/tiny", "r1", license="Apache-2.0")
    with pytest.raises(WeightsError, match="immutable"):
        push_model(client, signed_model, url, "acme/tiny", "r1")
    push_model(client, signed_model, url, "acme/tiny", "r2")
    assert sorted(list_revisions(client, url, "acme/tiny")) == [
        ("acme/tiny", "r1"),
        ("acme/tiny", "r2"),
    ]
    assert [m.revision for m in read_manifests(client, url, "acme/tiny")] == ["r2", "r1"]
    assert resolve_revision(client, url, "acme/tiny", None) == "r2"
    with pytest.raises(WeightsError, match="revisions there: r2, r1"):
        read_revision(client, url, "acme/tiny", "r9")
    with pytest.raises(WeightsError, match="no revision of 'acme/other'"):
        resolve_revision(client, url, "acme/other", None)


def test_a_new_revision_uploads_only_the_files_that_changed(
    signed_model: Path, registry: str, keys: Keys
) -> None:
    url, client = RegistryUrl.parse(registry), make_client()
    push_model(client, signed_model, url, "acme/tiny", "r1")
    (signed_model / "generation_config.json").write_text('{"temperature": 0.2}')
    sign_model(signed_model, keys.private)
    result = push_model(client, signed_model, url, "acme/tiny", "r2")
    assert result.uploaded_bytes == len('{"temperature": 0.2}')
    assert result.reused_bytes == result.manifest.total_bytes - result.uploaded_bytes


def test_push_refuses_a_directory_its_signature_does_not_cover(
    signed_model: Path, registry: str, tampering: Tampering
) -> None:
    tampering.apply(signed_model)
    url, client = RegistryUrl.parse(registry), make_client()
    with pytest.raises(WeightsError, match=f"{tampering.kind}: {tampering.path}"):
        push_model(client, signed_model, url, "acme/tiny", "v1")
    assert client.list_objects_v2(Bucket=url.bucket).get("KeyCount", 0) == 0
    assert client.list_multipart_uploads(Bucket=url.bucket).get("Uploads", []) == []


def test_push_needs_a_signature_and_valid_names(make_model: object, registry: str) -> None:
    model = make_model("unsigned", num_shards=1, shard_bytes=1024)  # type: ignore[operator]
    url, client = RegistryUrl.parse(registry), make_client()
    with pytest.raises(WeightsError, match="no such file"):
        push_model(client, model, url, "acme/tiny", "v1")
    with pytest.raises(SpecError, match="not valid"):
        push_model(client, model, url, "../escape", "v1")
    with pytest.raises(SpecError, match="not valid"):
        push_model(client, model, url, "acme/tiny", "files")


def test_s3_errors_say_what_to_check(
    signed_model: Path, s3_env: SeaweedS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = RegistryUrl.parse("s3://no-such-bucket/x")
    with pytest.raises(WeightsError, match="bucket 'no-such-bucket' does not exist"):
        push_model(make_client(), signed_model, url, "acme/tiny", "v1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(WeightsError, match="refused our credentials"):
        list_revisions(make_client(), url)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on 9
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(WeightsError, match=r"cannot reach the S3 server at http://127\.0\.0\.1:9"):
        list_revisions(make_client(), url)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(WeightsError, match="no S3 credentials"):
        make_client()


def test_registry_urls() -> None:
    assert RegistryUrl.parse("s3://b/p/q/").key("models", "x") == "p/q/models/x"
    assert RegistryUrl.parse("s3://b").key("blobs") == "blobs"
    for bad in ("http://b/p", "s3://", "s3:///p"):
        with pytest.raises(WeightsError):
            RegistryUrl.parse(bad)


def _manifest_json(**changes: object) -> str:
    files = [FileEntry(path="a/b.bin", size=1, sha256="0" * 64)]
    data = {"name": "acme/tiny", "revision": "v1", "digest": model_digest(files),
            "signature": {"size": 1, "sha256": "0" * 64},
            "files": [f.model_dump() for f in files]}  # fmt: skip
    data.update(changes)
    return json.dumps(data)


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "a//b", "./a", "a\\b", ""])
def test_manifests_with_unsafe_paths_are_refused(path: str) -> None:
    files = [{"path": path, "size": 1, "sha256": "0" * 64}]
    with pytest.raises(WeightsError, match="not a valid weights manifest"):
        parse_manifest(_manifest_json(files=files), "m.json")


def test_manifests_that_do_not_add_up_are_refused() -> None:
    assert parse_manifest(_manifest_json(), "m.json").name == "acme/tiny"
    with pytest.raises(WeightsError, match="digest does not match"):
        parse_manifest(_manifest_json(digest="sha256:" + "1" * 64), "m.json")
    twice = [{"path": "a", "size": 1, "sha256": "0" * 64}] * 2
    with pytest.raises(WeightsError, match="listed twice"):
        parse_manifest(_manifest_json(files=twice, digest=model_digest(
            [FileEntry(**f) for f in twice])), "m.json")  # type: ignore[arg-type]  # fmt: skip
    clash = [{"path": "a", "size": 1, "sha256": "0" * 64},
             {"path": "a/b", "size": 1, "sha256": "0" * 64}]  # fmt: skip
    digest = model_digest([FileEntry(**f) for f in clash])  # type: ignore[arg-type]
    with pytest.raises(WeightsError, match="as a file and as a directory"):
        parse_manifest(_manifest_json(files=clash, digest=digest), "m.json")
    with pytest.raises(WeightsError, match="not a valid"):
        parse_manifest("{not json", "m.json")


def test_shard_name_constant_matches_the_tiny_model(signed_model: Path) -> None:
    assert (signed_model / SHARD).is_file()


def test_pushing_again_repairs_a_blob_altered_in_the_registry(
    signed_model: Path, registry: str, keys: Keys, tmp_path: Path
) -> None:
    """Every pull refusal of an altered registry copy says to push again from the signed
    original; but push reused any blob of the right size, so the altered bytes stayed and
    every revision pushed after it (sharing them) was refused too. A reused blob is now
    checked against its SHA-256, and one that fails is uploaded again: the repair reaches
    every revision that shares it."""
    from inhouse.weights.pull import PullRequest, pull_model
    from inhouse.weights.registry import blob_key

    url, client = RegistryUrl.parse(registry), make_client()
    first = push_model(client, signed_model, url, "acme/tiny", "r1").manifest
    entry = next(f for f in first.files if f.path == SHARD)
    data = bytearray((signed_model / SHARD).read_bytes())
    data[len(data) // 2] ^= 1  # same size, one bit flipped
    client.put_object(Bucket=url.bucket, Key=blob_key(url, entry.sha256), Body=bytes(data))
    again = push_model(client, signed_model, url, "acme/tiny", "r2")
    assert again.uploaded_bytes == entry.size and again.repaired == (SHARD,)
    assert again.reused_bytes == first.total_bytes - entry.size
    for revision in ("r1", "r2"):
        request = PullRequest(url, "acme/tiny", revision, tmp_path / revision, keys.trust)
        result = pull_model(request)
        assert result.verification is not None and result.verification.ok


def test_an_unknown_revision_is_named_even_beside_a_broken_manifest(
    signed_model: Path, registry: str
) -> None:
    """Asking for a revision that is not there listed the revisions that are by parsing every
    manifest: one broken manifest beside it answered with that manifest's error ("not a valid
    weights manifest" of v0), not that the revision asked for does not exist."""
    url, client = RegistryUrl.parse(registry), make_client()
    push_model(client, signed_model, url, "acme/tiny", "v1")
    key = url.key("models", "acme/tiny", "v0", "manifest.json")
    client.put_object(Bucket=url.bucket, Key=key, Body=b"{not json")
    with pytest.raises(WeightsError, match=r"acme/tiny@v9 is not in .*revisions there: v0, v1"):
        read_revision(client, url, "acme/tiny", "v9")
