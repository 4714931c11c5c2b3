"""A stack's signed weights, made ready before any replica starts (what `inhouse up` calls).

    ready = prepare_weights(stack, stack_dir, cache)      # {pool name: PoolWeights}
    plan_stack(stack, ..., model_paths={p: str(w.path) for p, w in ready.items()})

For each pool with `weights:`, either pull `name@revision` from the registry into the cache
(free when cached, the cached copy re-hashed; one that fails is moved aside and fetched again)
or verify the local `weights_dir`. Any failure raises before anything starts: a
`VerificationFailed` whose message names the pool and the file, or a `WeightsError` naming the
pool (a key unreadable, the registry unreachable, credentials refused). Relative paths in the
stack are relative to its directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.weights import WeightsSpec
from inhouse.weights.cache import WeightCache
from inhouse.weights.errors import VerificationFailed, WeightsError
from inhouse.weights.messages import describe_failure
from inhouse.weights.pull import PullRequest, pull_model
from inhouse.weights.s3 import RegistryUrl
from inhouse.weights.signature import default_signature_path
from inhouse.weights.trust import Trust
from inhouse.weights.verdict import Verification
from inhouse.weights.verify import verify_model


@dataclass(frozen=True, slots=True)
class PoolWeights:
    pool: str
    path: Path  # the verified model directory the pool's engines load (real, no symlink)
    verification: Verification
    source: str  # "name@revision from s3://..." or the local directory
    fetched_bytes: int = 0
    quarantined: Path | None = None


def _resolve(path: str, base_dir: Path) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base_dir / candidate


def trust_of(weights: WeightsSpec, base_dir: Path) -> Trust:
    if weights.public_key is not None:
        return Trust.from_args(_resolve(weights.public_key, base_dir))
    chain = tuple(_resolve(c, base_dir) for c in weights.certificate_chain)
    return Trust.from_args(None, chain, weights.allow_expired_certificate)


def prepare_pool_weights(
    pool: PoolSpec, base_dir: Path, cache: Path, log: Callable[[str], None] = lambda s: None
) -> PoolWeights:
    """Pull and verify, or verify, one pool's weights; raises naming the pool when refused."""
    try:
        return _prepare(pool, base_dir, cache, log)
    except VerificationFailed as exc:
        raise VerificationFailed(exc.verification, f"pool {pool.name!r}: {exc}") from exc
    except WeightsError as exc:  # a key, the registry, the cache: say whose
        raise WeightsError(f"pool {pool.name!r}: {exc}") from exc


def _prepare(
    pool: PoolSpec, base_dir: Path, cache: Path, log: Callable[[str], None]
) -> PoolWeights:
    weights = pool.weights
    assert weights is not None, f"pool {pool.name} names no weights"
    trust = trust_of(weights, base_dir)
    if weights.weights_dir is not None:
        model_dir = _resolve(weights.weights_dir, base_dir)
        signature = _resolve(weights.signature, base_dir) if weights.signature else None
        # NOTE: the real directory is verified and handed to vLLM, which opens its files
        # minutes later (after the other pools' pulls): a symlink on the way could be
        # re-pointed in between, at weights nobody verified.
        real_dir = model_dir.resolve()
        result = verify_model(real_dir, trust, signature or default_signature_path(model_dir))
        _refuse_unless_ok(result)
        return PoolWeights(pool.name, real_dir, result, str(model_dir))
    assert weights.registry is not None and weights.name is not None, "checked by the spec"
    registry = RegistryUrl.parse(weights.registry)
    log(f"pool {pool.name}: pulling {weights.name}@{weights.revision or 'newest'} from {registry}")
    request = PullRequest(registry, weights.name, weights.revision, cache, trust,
                          verify_cached=True, digest=weights.digest)  # fmt: skip
    pulled = pull_model(request)
    assert pulled.verification is not None, "verify_cached: always verified"
    _refuse_unless_ok(pulled.verification)
    source = f"{pulled.name}@{pulled.revision} from {registry}"
    # NOTE: the content-addressed directory, not the by-name link, which can be re-pointed.
    content_dir = WeightCache(cache).model_dir(pulled.digest).resolve()
    return PoolWeights(pool.name, content_dir, pulled.verification, source,
                       pulled.fetched_bytes, pulled.quarantined)  # fmt: skip


def _refuse_unless_ok(result: Verification) -> None:
    if not result.ok:
        raise VerificationFailed(result, f"refusing to start it: {describe_failure(result)}")


def prepare_weights(
    stack: StackSpec, base_dir: Path, cache: Path, log: Callable[[str], None] = lambda s: None
) -> dict[str, PoolWeights]:
    """Every pool's weights, in stack order; the first refusal raises, naming the pool."""
    ready = {}
    for pool in stack.pools:
        if pool.weights is not None:
            ready[pool.name] = prepare_pool_weights(pool, base_dir, cache, log)
    return ready
