from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.routing import PolicyContext, make_policy, policy_names, policy_params


def test_registry_names_policies_and_checks_parameters() -> None:
    assert policy_names() == ["round_robin", "least_loaded", "session", "cache_aware", "oracle"]
    assert policy_params("cache_aware")["load_factor"] == 1.3
    with pytest.raises(SpecError, match="unknown; use one of: round_robin"):
        make_policy("random", PolicyContext(2))
    with pytest.raises(
        SpecError, match=r"routing\.params\.weight: unknown parameter .* load_factor"
    ):
        make_policy("cache_aware", PolicyContext(2), {"weight": 1})
    with pytest.raises(SpecError, match="needs a int"):
        make_policy("cache_aware", PolicyContext(2), {"max_blocks_per_replica": 1.5})
    policy = make_policy("cache_aware", PolicyContext(2), {"load_factor": 2})
    assert policy.filters  # built with the given parameter
