"""The Kubernetes remediation for a GPU with an uncorrectable ECC error, as exact commands.

Cordon the node (nothing new lands on it), then drain only the engine pod holding the faulty
GPU: `kubectl drain --pod-selector` evicts through the PodDisruptionBudget `inhouse render`
writes (one replica of a pool at a time), with the pod's own grace period (preStop sleep, then
vLLM's drain), so its in-flight requests finish. On a one-node cluster the evicted replica has
nowhere to go: the pool runs degraded on the other NVLink group until the GPU is replaced.
"""

from __future__ import annotations

from inhouse.render.layout import (
    is_single_node,
    pool_selector,
    replica_selector,
    termination_grace_s,
)
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import PoolSpec, StackSpec


def ecc_remediation(
    stack: StackSpec, pool: PoolSpec, replica_index: int | None, node: str
) -> list[list[str]]:
    """kubectl argument lists (without `kubectl`) for the replica of `pool` on the bad GPU
    (`replica_index`: the static replica; None for a scaled pool, whose pods no label tells
    apart: the drain takes the pool's pods on `node`, one at a time through the PDB); the
    grace period is the one rendered into the pod (`terminationGracePeriodSeconds`)."""
    grace, _ = termination_grace_s(stack, pool, RenderOptions().prestop_sleep_s)
    if replica_index is None or not is_single_node(stack):
        selector = pool_selector(pool.name)
    else:
        selector = replica_selector(pool.name, replica_index)
    return [
        ["cordon", node],
        [
            "drain",
            node,
            f"--pod-selector={selector}",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            f"--grace-period={grace}",
            f"--timeout={grace + 60}s",
        ],
    ]
