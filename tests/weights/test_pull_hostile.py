"""Pulls against a registry that lies with validly signed material, and a node cache that was
damaged: a revision the cache already holds never silently becomes another model, a pinned
digest refuses any other, and a cached copy whose files changed size or vanished is set aside
and fetched again."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from tests.weights.clients import CountingClient
from tests.weights.conftest import SHARD, Keys
from tests.weights.tiny_model import write_tiny_model

from inhouse.errors import InhouseError
from inhouse.spec.stack import parse_stack
from inhouse.weights.cache import WeightCache
from inhouse.weights.errors import VerificationFailed
from inhouse.weights.pull import PullRequest, pull_model
from inhouse.weights.registry import push_model, read_revision, revision_key
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import sign_model
from inhouse.weights.stack import prepare_weights
from inhouse.weights.trust import Trust
from inhouse.weights.verify import verify_model

NAME = "acme/tiny"
PART = 256 * 1024


def request(
    url: RegistryUrl, cache: Path, trust: Trust, revision: str, **kwargs: object
) -> PullRequest:
    values: dict[str, object] = {"part_bytes": PART, "workers": 4, **kwargs}
    return PullRequest(url, NAME, revision, cache, trust, **values)  # type: ignore[arg-type]


def _push(tmp_path: Path, keys: Keys, url: RegistryUrl, revision: str, seed: int) -> str:
    model = write_tiny_model(tmp_path / f"release-{revision}", seed=seed)
    sign_model(model, keys.private)
    return push_model(make_client(), model, url, NAME, revision).manifest.digest


def _replay(url: RegistryUrl, old: str, new: str) -> None:
    """What a hostile (or restored-from-backup) registry can do without any key: serve an older
    revision's signed files under a newer revision's name."""
    client = make_client()
    manifest, signature = read_revision(client, url, NAME, old)
    relabelled = manifest.model_copy(update={"revision": new})
    for leaf, body in (("model.sig", signature), ("manifest.json",
                       relabelled.model_dump_json().encode())):  # fmt: skip
        client.put_object(Bucket=url.bucket, Key=revision_key(url, NAME, new, leaf), Body=body)


@pytest.mark.parametrize("verify_cached", [False, True], ids=["plain", "verify-cached"])
def test_a_revision_the_cache_holds_is_never_replaced_by_another_signed_model(
    registry: str, keys: Keys, tmp_path: Path, verify_cached: bool
) -> None:
    """v1 (vulnerable) and v2 (the fix) are both signed by the release key. The registry later
    serves v1's manifest and signature as v2: every signature checks out, and the pull relinked
    by-name/acme/tiny/v2 to v1's bytes, so every engine on the node served the old model."""
    url = RegistryUrl.parse(registry)
    _push(tmp_path, keys, url, "v1", seed=1)
    fixed = _push(tmp_path, keys, url, "v2", seed=2)
    cache = tmp_path / "cache"
    first = pull_model(request(url, cache, keys.trust, "v2"))
    assert first.digest == fixed
    _replay(url, "v1", "v2")
    with pytest.raises(VerificationFailed) as refused:
        pull_model(request(url, cache, keys.trust, "v2", verify_cached=verify_cached))
    message = str(refused.value)
    assert f"{NAME}@v2" in message and fixed in message  # the revision and what it was
    assert "by-name" in message  # how to accept a deliberate re-push
    assert first.path.resolve() == WeightCache(cache).model_dir(fixed)
    assert verify_model(first.path, keys.trust).ok  # v2's signature beside it, untouched
    assert pull_model(request(url, cache, keys.trust, "v1")).digest != fixed  # v1 still pulls


def _truncate(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)


@pytest.mark.parametrize(
    "damage",
    [lambda d: _truncate(d / SHARD), lambda d: (d / "tokenizer.json").unlink(),
     lambda d: (d / SHARD).write_bytes((d / SHARD).read_bytes() + b"\0")],
    ids=["truncated", "removed", "grown"],
)  # fmt: skip
def test_a_cached_copy_whose_files_changed_size_is_set_aside_and_fetched_again(
    registry: str, keys: Keys, tmp_path: Path, damage: object
) -> None:
    """A cached model with a file truncated, grown or deleted (a failing disk, a hand) did not
    count as cached, so the pull fetched the model again and then failed renaming it onto the
    damaged copy ("Directory not empty", worded as a disk problem), every time: the repair
    docs/weights.md promises (`--verify-cached`) never happened and the pool never started."""
    url = RegistryUrl.parse(registry)
    digest = _push(tmp_path, keys, url, "v1", seed=1)
    cache = tmp_path / "cache"
    first = pull_model(request(url, cache, keys.trust, "v1"))
    damage(first.path.resolve())  # type: ignore[operator]
    healed = pull_model(request(url, cache, keys.trust, "v1", verify_cached=True))
    assert healed.quarantined is not None and healed.quarantined.parent == cache / "quarantine"
    assert healed.digest == digest and not healed.was_cached
    assert verify_model(healed.path, keys.trust).ok
    plain = dataclasses.replace(request(url, cache, keys.trust, "v1"))
    assert pull_model(plain).was_cached


def test_a_pinned_digest_refuses_another_signed_model_on_a_node_that_never_pulled_it(
    registry: str, keys: Keys, tmp_path: Path
) -> None:
    """A new node (scale-out, a replaced NVMe) has nothing to compare with: the replayed v1
    verified and was served as v2. The digest pinned in the stack (or `pull --digest`) is
    compared with the registry's before a byte is fetched."""
    url = RegistryUrl.parse(registry)
    _push(tmp_path, keys, url, "v1", seed=1)
    fixed = _push(tmp_path, keys, url, "v2", seed=2)
    _replay(url, "v1", "v2")
    cache = tmp_path / "cache"
    counting = CountingClient(make_client())
    with pytest.raises(VerificationFailed) as refused:
        pull_model(request(url, cache, keys.trust, "v2", digest=fixed), counting)
    assert f"{NAME}@v2" in str(refused.value) and fixed in str(refused.value)
    assert counting.blob_gets == 0
    assert not (cache / "by-name" / NAME / "v2").exists()


def test_a_pinned_digest_that_matches_pulls(registry: str, keys: Keys, tmp_path: Path) -> None:
    url = RegistryUrl.parse(registry)
    digest = _push(tmp_path, keys, url, "v1", seed=1)
    result = pull_model(request(url, tmp_path / "cache", keys.trust, "v1", digest=digest))
    assert result.digest == digest and result.verification is not None
    assert result.verification.ok


def test_a_stack_pool_pins_its_digest(registry: str, keys: Keys, tmp_path: Path) -> None:
    """`weights: {..., digest: sha256:...}` reaches the pull `inhouse up` runs."""
    url = RegistryUrl.parse(registry)
    _push(tmp_path, keys, url, "v1", seed=1)
    fixed = _push(tmp_path, keys, url, "v2", seed=2)
    _replay(url, "v1", "v2")
    weights = {"registry": registry, "name": NAME, "revision": "v2", "digest": fixed,
               "public_key": str(keys.public)}  # fmt: skip
    stack = parse_stack({"name": "s", "pools": [{"name": "chat", "model": "tiny",
                         "weights": weights}]})  # fmt: skip
    with pytest.raises(VerificationFailed) as refused:
        prepare_weights(stack, tmp_path, tmp_path / "cache")
    assert "pool 'chat'" in str(refused.value) and fixed in str(refused.value)


def test_pull_digest_refusal_exits_1_naming_the_revision(
    registry: str, keys: Keys, tmp_path: Path
) -> None:
    url = RegistryUrl.parse(registry)
    _push(tmp_path, keys, url, "v1", seed=1)
    fixed = _push(tmp_path, keys, url, "v2", seed=2)
    _replay(url, "v1", "v2")
    argv = [sys.executable, "-m", "inhouse.cli.weights", "pull", f"{NAME}@v2", "--registry",
            registry, "--cache", str(tmp_path / "c"), "--public-key", str(keys.public),
            "--digest", fixed]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"refusing {NAME}@v2" in done.stderr and fixed in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("where", ["config.json", "sub"], ids=["file", "directory"])
def test_a_symlink_planted_in_a_partial_pull_never_redirects_its_writes(
    registry: str, keys: Keys, tmp_path: Path, where: str
) -> None:
    """`partial/<digest>/` is at a path anyone can compute from the registry. A symlink planted
    there by another local user (a shared cache) made the resuming pull, often root in an init
    container, truncate and overwrite the file it pointed at outside the cache."""
    url = RegistryUrl.parse(registry)
    model = write_tiny_model(tmp_path / "release", seed=1)
    (model / "sub").mkdir()
    (model / "sub" / "extra.json").write_text("{}")
    sign_model(model, keys.private)
    digest = push_model(make_client(), model, url, NAME, "v1").manifest.digest
    cache = tmp_path / "cache"
    partial = WeightCache(cache).partial_dir(digest) / "model"
    partial.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "extra.json").write_text("precious\n")
    if where == "config.json":
        (partial / "config.json").symlink_to(victim / "extra.json")
    else:
        (partial / "sub").symlink_to(victim)
    result = pull_model(request(url, cache, keys.trust, "v1"))
    assert (victim / "extra.json").read_text() == "precious\n"
    assert result.verification is not None and result.verification.ok


def test_a_revision_named_inside_another_revisions_link_never_writes_into_its_model(
    registry: str, keys: Keys, tmp_path: Path
) -> None:
    """`acme@tiny` (model acme, revision tiny) links by-name/acme/tiny to its verified
    directory; then `acme/tiny@v1`'s link, signature and manifest were written through that
    link, into the verified model, which from then on failed verification (extra files) on
    every node: anyone who can push a name to the registry could take a model down."""
    url = RegistryUrl.parse(registry)
    model = write_tiny_model(tmp_path / "release", seed=1)
    sign_model(model, keys.private)
    push_model(make_client(), model, url, "acme", "tiny")
    push_model(make_client(), model, url, NAME, "v1")
    cache = tmp_path / "cache"
    outer = dataclasses.replace(request(url, cache, keys.trust, "tiny"), name="acme")
    first = pull_model(outer)
    with pytest.raises(InhouseError, match="acme/tiny"):
        pull_model(request(url, cache, keys.trust, "v1"))
    assert sorted(p.name for p in first.path.iterdir()) == sorted(p.name for p in model.iterdir())
    assert verify_model(first.path, keys.trust).ok
    other = tmp_path / "other-cache"  # the other order: a directory where the link would go
    pull_model(request(url, other, keys.trust, "v1"))
    with pytest.raises(InhouseError, match="directory of model acme/tiny's revisions"):
        pull_model(dataclasses.replace(outer, cache=other))


def test_concurrent_pulls_of_one_revision_as_two_contents_never_relink_it(
    registry: str, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pulls of acme/tiny@v2 into one node's cache at once, served two signed contents (a
    registry replaying another revision to one pod, or two registries, staging and prod, on
    one node): each checked that the revision was not linked yet, then both linked it, the
    last one silently re-pointing what the first had verified. Only one of them links it; the
    other is refused as a replaced revision. (Both are held between their check and their
    link, so the race is certain, not a matter of timing.)"""
    from inhouse.weights import cache as cache_module

    url = RegistryUrl.parse(registry)
    _push(tmp_path, keys, url, "v1", seed=1)
    second = _push(tmp_path, keys, url, "v2", seed=2)
    make_client().create_bucket(Bucket=f"{url.bucket}-b")
    other = RegistryUrl(f"{url.bucket}-b", url.prefix)
    try:
        model = write_tiny_model(tmp_path / "other-v2", seed=3)
        sign_model(model, keys.private)
        first = push_model(make_client(), model, other, NAME, "v2").manifest.digest
        both_checked = threading.Barrier(2, timeout=5)
        install = cache_module.WeightCache.install

        def held(self: WeightCache, partial: Path, manifest: object) -> Path:
            with contextlib.suppress(threading.BrokenBarrierError):
                both_checked.wait()
            return install(self, partial, manifest)  # type: ignore[arg-type]

        monkeypatch.setattr(cache_module.WeightCache, "install", held)
        cache = tmp_path / "cache"
        outcomes: dict[str, object] = {}

        def pull(source: RegistryUrl) -> None:
            try:
                outcomes[str(source)] = pull_model(request(source, cache, keys.trust, "v2"))
            except Exception as exc:  # the test reads it
                outcomes[str(source)] = exc

        threads = [threading.Thread(target=pull, args=(s,)) for s in (url, other)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        refused = [o for o in outcomes.values() if isinstance(o, VerificationFailed)]
        pulled = [o for o in outcomes.values() if not isinstance(o, VerificationFailed)]
        assert len(refused) == 1 and len(pulled) == 1, outcomes
        linked = WeightCache(cache).linked_digest(NAME, "v2")
        assert linked == pulled[0].digest and linked in (first, second)  # type: ignore[attr-defined]
    finally:
        client = make_client()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=other.bucket):
            for item in page.get("Contents", []):
                client.delete_object(Bucket=other.bucket, Key=item["Key"])
        client.delete_bucket(Bucket=other.bucket)
