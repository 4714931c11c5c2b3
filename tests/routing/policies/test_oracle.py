from __future__ import annotations

import pytest
from tests.routing.policies.pool import Pool, request


def test_oracle_reads_the_engines_true_caches() -> None:
    pool = Pool("oracle")
    pool.cached = [0, 0, 40, 0]
    assert pool.send(request("a", [(1, 16 * 50)])) == 2
    pool.cached = [0, 0, 0, 0]
    # in flight on replica 2 (dispatched, not yet computed): the oracle counts it too
    assert pool.send(request("b", [(1, 16 * 50), (2, 100)])) == 2
    with pytest.raises(AssertionError, match="count_cached_prefix"):
        Pool("oracle").send(request("c", [(1, 100)]))
