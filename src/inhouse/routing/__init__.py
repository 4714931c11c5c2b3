"""Replica and pool choice, shared by the fleet simulator and the live gateway.

Policies are filters → scorers → picker, built by name from one registry; each takes immutable
views of the request and the replicas and returns a `Decision`; what it learns is recorded only
through `observe`, `on_first_token` and `on_finish`. See docs/routing.md.
"""

from inhouse.routing.basic import LeastLoaded, RoundRobin, SessionAffinity
from inhouse.routing.cache_aware import CacheAware, Oracle
from inhouse.routing.framework import Policy, PolicyContext
from inhouse.routing.index import PrefixIndex
from inhouse.routing.pools import PoolChoice, choose_pool, is_saturated, primary_pool
from inhouse.routing.registry import POLICIES, make_policy, policy_names, policy_params
from inhouse.routing.view import Decision, ReplicaView, RequestView

__all__ = [
    "POLICIES",
    "CacheAware",
    "Decision",
    "LeastLoaded",
    "Oracle",
    "Policy",
    "PolicyContext",
    "PoolChoice",
    "PrefixIndex",
    "ReplicaView",
    "RequestView",
    "RoundRobin",
    "SessionAffinity",
    "choose_pool",
    "is_saturated",
    "make_policy",
    "policy_names",
    "policy_params",
    "primary_pool",
]
