"""The node's weight cache against whoever else can write to it (a hostPath several pods share,
another local user): paths anyone can compute from the registry (`partial/<digest>`,
`sha256/<digest>`, a temporary file's name, a lock) never redirect what a pull writes, and the
directory the engines load is never a link that can be re-pointed after it verified."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest
from tests.weights.conftest import Keys
from tests.weights.tiny_model import write_tiny_model

from inhouse.weights.cache import WeightCache, write_atomic
from inhouse.weights.pull import PullRequest, pull_model
from inhouse.weights.registry import push_model
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import sign_model
from inhouse.weights.verify import verify_model

NAME = "acme/tiny"
PART = 256 * 1024


def _pushed(registry: str, keys: Keys, tmp_path: Path) -> tuple[RegistryUrl, str]:
    """acme/tiny@v1 pushed: the registry's URL and the revision's content digest."""
    url = RegistryUrl.parse(registry)
    model = write_tiny_model(tmp_path / "release", seed=1)
    sign_model(model, keys.private)
    return url, push_model(make_client(), model, url, NAME, "v1").manifest.digest


def _request(url: RegistryUrl, cache: Path, keys: Keys, **kwargs: object) -> PullRequest:
    values: dict[str, object] = {"part_bytes": PART, "workers": 4, **kwargs}
    return PullRequest(url, NAME, "v1", cache, keys.trust, **values)  # type: ignore[arg-type]


def test_a_symlink_planted_as_the_partial_directory_never_redirects_the_pull(
    registry: str, keys: Keys, tmp_path: Path
) -> None:
    """0fdc70c refused links *inside* `partial/<digest>/`, but the directory itself was
    followed: a link planted there sent the signature, the journal and every model file (root's
    writes, in an init container) into the directory it pointed at."""
    url, digest = _pushed(registry, keys, tmp_path)
    cache = tmp_path / "cache"
    victim = tmp_path / "victim"
    victim.mkdir()
    partial = WeightCache(cache).partial_dir(digest)
    partial.parent.mkdir(parents=True)
    partial.symlink_to(victim)
    result = pull_model(_request(url, cache, keys))
    assert list(victim.iterdir()) == []
    assert result.verification is not None and result.verification.ok
    assert not partial.is_symlink()


def test_a_symlink_planted_as_the_content_address_is_not_served(
    registry: str, keys: Keys, tmp_path: Path
) -> None:
    """`sha256/<digest>` is what the engines load because no link can re-point it after the
    pull verified it (docs/weights.md). A link planted there, to a good copy, verified and was
    linked: re-pointed once the pod's init container had finished, vLLM loaded other files."""
    url, digest = _pushed(registry, keys, tmp_path)
    cache = tmp_path / "cache"
    elsewhere = tmp_path / "elsewhere"
    first = pull_model(_request(url, tmp_path / "other-cache", keys))
    os.rename(first.path.resolve(), elsewhere)
    content = WeightCache(cache).model_dir(digest)
    content.parent.mkdir(parents=True)
    content.symlink_to(elsewhere)
    result = pull_model(_request(url, cache, keys, verify_cached=True))
    assert not content.is_symlink() and content.is_dir()
    assert result.path.resolve() == content
    assert result.verification is not None and result.verification.ok
    assert verify_model(result.path, keys.trust).ok


def test_a_temporary_file_name_planted_as_a_symlink_is_not_followed(tmp_path: Path) -> None:
    """`write_atomic` (a revision's signature and manifest beside its link) wrote through
    `.<name>.<pid>.tmp`, a name anyone can guess (an init container's pid is small), following a
    link planted there to any file the pull can write."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "by-name" / "v1.sig"
    target.parent.mkdir()
    (target.parent / f".{target.name}.{os.getpid()}.tmp").symlink_to(victim)
    write_atomic(target, b"signature")
    assert victim.read_text() == "precious\n"
    assert target.read_bytes() == b"signature" and not target.is_symlink()


def test_a_symlink_planted_as_a_lock_file_is_not_followed(tmp_path: Path) -> None:
    """The lock (`locks/<digest>.lock`) was opened for appending, through any link: a link to a
    file that does not exist yet created it (e.g. /etc/nologin, root's pull in an init
    container)."""
    cache = WeightCache(tmp_path / "cache")
    digest = "sha256:" + "ab" * 32
    created = tmp_path / "nologin"
    lock = cache.root / "locks" / f"{'ab' * 32}.lock"
    lock.parent.mkdir(parents=True)
    lock.symlink_to(created)
    with cache.lock(digest):
        pass
    assert not created.exists()


@pytest.mark.parametrize("planted", ["partial", "sha256", "by-name"])
def test_a_symlink_planted_as_a_cache_directory_is_refused_naming_it(
    registry: str, keys: Keys, tmp_path: Path, planted: str
) -> None:
    """`CACHE/partial` or `CACHE/sha256` as a link sent every pull's writes, or the directory
    the engines load, wherever it pointed."""
    url, _ = _pushed(registry, keys, tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (cache / planted).symlink_to(victim)
    with pytest.raises(Exception, match=f"{planted}.*(link|symlink)") as refused:
        pull_model(_request(url, cache, keys))
    assert type(refused.value).__name__ == "WeightsError"
    assert list(victim.iterdir()) == []


def test_a_pull_waiting_for_another_says_so(
    registry: str, keys: Keys, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Pulls of one model on one node take turns on a lock; the one waiting said nothing, so an
    init container stuck behind a stalled pull looked hung, with no word of what it waited for
    or where (`kubectl logs` showed an empty log)."""
    url, digest = _pushed(registry, keys, tmp_path)
    cache = WeightCache(tmp_path / "cache")
    lock = cache.root / "locks" / f"{digest.partition(':')[2]}.lock"
    lock.parent.mkdir(parents=True)
    results: list[object] = []
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        thread = threading.Thread(
            target=lambda: results.append(pull_model(_request(url, cache.root, keys)))
        )
        thread.start()
        deadline = time.monotonic() + 60
        while "waiting" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not results  # it waits while another pull holds the lock
        fcntl.flock(held, fcntl.LOCK_UN)
    thread.join(60)
    assert "another pull" in caplog.text and str(lock) in caplog.text
    assert len(results) == 1


@pytest.mark.parametrize("planted", ["modeling_evil.py", ".git/config"])
def test_a_file_planted_in_a_partial_pull_is_never_installed_nor_blocks_it(
    registry: str, keys: Keys, tmp_path: Path, planted: str
) -> None:
    """A file no pull writes, left in `partial/<digest>/model/`, stayed there: an extra file
    made every later pull of the model fail verification ('extra', and 'pull again', which
    failed again), and one under `.git/` (which verification skips) was installed inside the
    verified model."""
    url, digest = _pushed(registry, keys, tmp_path)
    cache = tmp_path / "cache"
    model = WeightCache(cache).partial_dir(digest) / "model"
    (model / planted).parent.mkdir(parents=True)
    (model / planted).write_text("planted\n")
    result = pull_model(_request(url, cache, keys))
    assert result.verification is not None and result.verification.ok
    assert not (result.path / planted).exists()
    assert not (result.path / planted.split("/")[0]).exists()
