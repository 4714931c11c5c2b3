"""Which engine pod a production drill acts on, and the kubectl selector that reaches it alone.

On one node a pool is a StatefulSet: replica i is pod `<pool>-i`, which keeps its name (and the
label the StatefulSet controller gives it, `layout.replica_selector`) across a restart. On
several nodes a pool is a Deployment, whose pods carry the template's labels and nothing that
tells one replica from another, and whose replacement pod gets a new name. There the drill
chooses one running pod of the pool and labels it (`DRILL_VICTIM_LABEL`, removed from every
other pod of the pool first, so a label an aborted run left behind selects nothing), and acts
on that label; what follows a replacement (its readiness) is read from the pool's pods.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from inhouse.render.layout import engine_units, pool_selector, replica_selector
from inhouse.spec.stack import PoolSpec, StackSpec

DRILL_VICTIM_LABEL = "inhouse.dev/drill-victim"
POD = "POD"  # the chosen pod's name in the kubectl argument lists; the script's $POD
NEW_POD = "NEW_POD"  # a scaled pool's replacement pod, found after the kill; $NEW_POD


@dataclass(frozen=True, slots=True)
class Victim:
    """The replica a drill acts on. `workload`: `statefulset/<pool>` or `deployment/<pool>`;
    `index`: the static replica's index, None for a scaled pool's pod; `selector`: its pod and
    no other; `pods`: the pool's pods (a replacement's readiness); `choose`: the kubectl
    argument lists that label the chosen pod first (none for a static replica)."""

    workload: str
    index: int | None
    selector: str
    pods: str
    choose: tuple[list[str], ...]

    @property
    def kind(self) -> str:
        return {"statefulset": "StatefulSet", "deployment": "Deployment"}[
            self.workload.partition("/")[0]
        ]

    def choose_shell(self, kubectl: str = "kubectl") -> str:
        """The shell lines of `choose` (empty for a static replica): `$POD` is the pod."""
        if not self.choose:
            return ""
        clear, find, mark = (shlex.join(argv) for argv in self.choose)
        mark = mark.replace(f" {POD} ", ' "$POD" ')
        return (
            f"{kubectl} {clear} || true\n"
            f"POD=$({kubectl} {find})\n"
            f'test -n "$POD" || {{ echo "no running pod of the pool" >&2; exit 1; }}\n'
            f"{kubectl} {mark}\n"
            'echo "drill victim: pod $POD"'
        )


def last_victim(stack: StackSpec, pool: PoolSpec, ns: str, drill: str) -> Victim:
    """The pool's last static replica, or one running pod of its Deployment."""
    units = [u for u in engine_units(stack) if u.pool.name == pool.name]
    unit = units[-1]
    pods = pool_selector(pool.name)
    if unit.replica_index is not None:
        index = unit.replica_index
        return Victim(f"statefulset/{unit.workload}", index, replica_selector(pool.name, index),
                      pods, ())  # fmt: skip
    mark = f"{DRILL_VICTIM_LABEL}={drill}"
    choose = (
        ["-n", ns, "label", "pods", "-l", pods, f"{DRILL_VICTIM_LABEL}-"],
        ["-n", ns, "get", "pods", "-l", pods, "--field-selector=status.phase=Running",
         "-o", "jsonpath={.items[0].metadata.name}"],
        ["-n", ns, "label", "pod", POD, mark, "--overwrite"],
    )  # fmt: skip
    return Victim(f"deployment/{unit.workload}", None, f"{pods},{mark}", pods, choose)
