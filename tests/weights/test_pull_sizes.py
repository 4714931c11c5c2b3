"""A registry manifest whose file sizes (not signed, not part of the content digest) disagree
with the objects: the refusal names the file and says the manifest was altered, and the pull
never reports it as a server that cannot do ranged GETs, nor as a disk problem."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from tests.weights.clients import CountingClient, DroppedConnection
from tests.weights.conftest import SHARD, Keys

from inhouse.errors import InhouseError
from inhouse.weights.download import plan_parts
from inhouse.weights.pull import PullRequest, pull_model
from inhouse.weights.registry import blob_key, push_model, read_revision, revision_key
from inhouse.weights.s3 import RegistryUrl, make_client

NAME = "acme/tiny"
PART = 256 * 1024


@pytest.mark.parametrize("extra_bytes", [1, PART, 3 * PART + 7], ids=["byte", "part", "parts"])
def test_a_manifest_size_past_the_object_names_the_file_and_the_cause(
    signed_model: Path, registry: str, keys: Keys, tmp_path: Path, extra_bytes: int
) -> None:
    url = RegistryUrl.parse(registry)
    push_model(make_client(), signed_model, url, NAME, "v1")
    client = make_client()
    manifest, _ = read_revision(client, url, NAME, "v1")
    files = tuple(
        f.model_copy(update={"size": f.size + extra_bytes}) if f.path == SHARD else f
        for f in manifest.files
    )
    changed = manifest.model_copy(update={"files": files})
    key = revision_key(url, NAME, "v1", "manifest.json")
    client.put_object(Bucket=url.bucket, Key=key, Body=changed.model_dump_json().encode())
    request = PullRequest(url, NAME, "v1", tmp_path / "c", keys.trust, part_bytes=PART)
    with pytest.raises(InhouseError) as refused:
        pull_model(dataclasses.replace(request, workers=2))
    message = str(refused.value)
    assert SHARD in message and "manifest" in message
    assert "Range requests" not in message and "free space" not in message


def test_a_missing_blob_names_the_file(
    signed_model: Path, registry: str, keys: Keys, tmp_path: Path
) -> None:
    """It was 'S3 error NoSuchKey: ...' naming a blob key, not the model's file."""
    url = RegistryUrl.parse(registry)
    push_model(make_client(), signed_model, url, NAME, "v1")
    client = make_client()
    manifest, _ = read_revision(client, url, NAME, "v1")
    entry = next(f for f in manifest.files if f.path == SHARD)
    client.delete_object(Bucket=url.bucket, Key=blob_key(url, entry.sha256))
    request = PullRequest(url, NAME, "v1", tmp_path / "c", keys.trust, part_bytes=PART)
    with pytest.raises(InhouseError) as refused:
        pull_model(request)
    assert f"{SHARD}: its content" in str(refused.value)
    assert "push the signed original again, as a new revision" in str(refused.value)


@pytest.mark.parametrize("verify_cached", [False, True], ids=["plain", "verify-cached"])
@pytest.mark.parametrize("change", [1, -1], ids=["larger", "smaller"])
def test_a_manifest_size_that_lies_never_quarantines_a_good_cached_copy(
    signed_model: Path, registry: str, keys: Keys, tmp_path: Path, verify_cached: bool, change: int
) -> None:
    """Sizes are not signed: a registry that changed one moved the node's good cached copy to
    quarantine/ (and then failed fetching a fresh one), an outage from an unsigned field. The
    cached copy is re-hashed instead, kept when it verifies, and linked with its real sizes."""
    url = RegistryUrl.parse(registry)
    push_model(make_client(), signed_model, url, NAME, "v1")
    cache = tmp_path / "c"
    request = PullRequest(url, NAME, "v1", cache, keys.trust, part_bytes=PART)
    first = pull_model(request)
    client = make_client()
    manifest, _ = read_revision(client, url, NAME, "v1")
    files = tuple(
        f.model_copy(update={"size": f.size + change}) if f.path == SHARD else f
        for f in manifest.files
    )
    key = revision_key(url, NAME, "v1", "manifest.json")
    lying = manifest.model_copy(update={"files": files}).model_dump_json().encode()
    client.put_object(Bucket=url.bucket, Key=key, Body=lying)
    again = pull_model(dataclasses.replace(request, verify_cached=verify_cached))
    assert again.quarantined is None and not (cache / "quarantine").exists()
    assert again.was_cached and again.path.resolve() == first.path.resolve()
    assert again.verification is not None and again.verification.ok
    assert again.total_bytes == sum(p.stat().st_size for p in signed_model.iterdir())
    linked = json.loads(again.path.with_name(again.path.name + ".json").read_text())
    sizes = {f["path"]: f["size"] for f in linked["files"]}
    assert sizes[SHARD] == (signed_model / SHARD).stat().st_size


def test_a_resumed_pull_whose_manifest_sizes_changed_starts_afresh(
    signed_model: Path, registry: str, keys: Keys, tmp_path: Path
) -> None:
    """The part journal was keyed by the content digest and the part size, but the sizes are
    in neither: a pull interrupted under one manifest and resumed under another (sizes changed)
    took part numbers of one plan for parts of the other, and died with an IndexError
    traceback once those numbers ran past the new plan's last part."""
    url = RegistryUrl.parse(registry)
    push_model(make_client(), signed_model, url, NAME, "v1")
    client = make_client()
    manifest, _ = read_revision(client, url, NAME, "v1")
    parts = plan_parts([(f, "") for f in manifest.files], PART)
    before_last = sum(p.num_bytes for p in parts[:-1])  # every part but the last one lands
    request = PullRequest(url, NAME, "v1", tmp_path / "c", keys.trust, part_bytes=PART)
    dropping = CountingClient(make_client(), fail_after_bytes=before_last)
    with pytest.raises(DroppedConnection):
        pull_model(dataclasses.replace(request, workers=1), dropping)
    shrunk = "model-00001-of-00002.safetensors"
    files = tuple(
        f.model_copy(update={"size": f.size - 2 * PART}) if f.path == shrunk else f
        for f in manifest.files
    )
    key = revision_key(url, NAME, "v1", "manifest.json")
    lying = manifest.model_copy(update={"files": files}).model_dump_json().encode()
    client.put_object(Bucket=url.bucket, Key=key, Body=lying)
    with pytest.raises(InhouseError) as refused:
        pull_model(request)
    assert shrunk in str(refused.value) and "manifest" in str(refused.value)
