"""Replica and pool choice, shared by the fleet simulator and the live gateway.

Policies are filters → scorers → picker, built by name from one registry; each takes immutable
views of the request and the replicas and returns a `Decision`; what it learns is recorded only
through `observe`, `on_first_token` and `on_finish`. See docs/routing.md.

Layout (llm-d's inference scheduler's, one plugin per file): `view` (what a policy sees and
answers), `framework` (the pipeline), `filters/`, `scorers/`, `pickers/` (the plugins; they
import only `view` and `framework`), `policies/` (each policy composed of plugins), `registry`
(policies by name), `index` (the approximate prefix index) and `pools` (pool choice).
"""

from inhouse.routing.framework import Policy, PolicyContext
from inhouse.routing.index import PrefixIndex
from inhouse.routing.policies.cache_aware import CacheAware
from inhouse.routing.policies.least_loaded import LeastLoaded
from inhouse.routing.policies.oracle import Oracle
from inhouse.routing.policies.round_robin import RoundRobin
from inhouse.routing.policies.session import SessionAffinity
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
