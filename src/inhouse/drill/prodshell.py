"""What every production drill's steps are made of: the step itself, the agent load the drills
drive, and the shell lines for kubectl, promtool, amtool and `inhouse bench`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from inhouse.drill.victim import NEW_POD, POD
from inhouse.spec.stack import PoolSpec
from inhouse.workload.agent import AgentWorkload

NODE = "NODE"  # the node under drill; the scripts read it from $NODE


@dataclass
class Step:
    title: str
    shell: str
    checks: list[str] = field(default_factory=list)
    kubectl: list[list[str]] = field(default_factory=list)
    promql: list[str] = field(default_factory=list)
    manifests: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    rule_test: str | None = None


@dataclass(frozen=True, slots=True)
class AgentLoad:
    """The agent sessions the drills' loads drive: the planned peak of the `plan.json` beside
    the stack, else the agent workload's own default, worded as such (no step claims a planned
    peak it does not have). `source` says which, in drills.md and each script."""

    sessions: int
    source: str
    is_planned: bool
    params: tuple[tuple[str, str], ...] = ()  # the plan's agent generator parameters

    def workload(self, sessions: int) -> str:
        """`inhouse bench`'s workload arguments: the agent generator with the plan's
        parameters (its traffic shape), driving `sessions` sessions."""
        shape = "".join(f" -p {shlex.quote(f'{k}={v}')}" for k, v in self.params)
        return f"--workload agent{shape} -p sessions={sessions}"

    def share(self, fraction: float = 1.0) -> tuple[int, str]:
        """(sessions, words) for `fraction` of the load, e.g. the soak's 60%."""
        num = max(1, round(fraction * self.sessions))
        part = "" if fraction == 1.0 else f"{fraction:.0%} of "
        if self.is_planned:
            return num, f"{part}planned peak ({num} sessions)"
        return num, f"{num} sessions ({part}the agent workload's default)"


def default_agent_load(why: str = "no plan.json beside the stack") -> AgentLoad:
    sessions = AgentWorkload().sessions
    return AgentLoad(
        sessions,
        f"{why}: the loads run the agent workload's default of {sessions} sessions, not a "
        "planned peak; put the plan.json `inhouse plan` wrote beside the stack file to drill at "
        "the plan's peak",
        False,
    )


def _k(argv: list[str]) -> str:
    """`argv`'s shell line, the script's variables put in for the placeholders: the node under
    drill, and the chosen pods' names (whole words)."""
    line = "kubectl " + shlex.join(argv).replace(f"'{NODE}'", '"$NODE"').replace(NODE, '"$NODE"')
    return line.replace(f" {POD} ", ' "$POD" ').replace(f" {NEW_POD} ", ' "$NEW_POD" ')


def _apply_on_node(ns: str, manifest: str) -> str:
    """`kubectl apply` of a manifest whose node selector names the node under drill: the file
    says `NODE` (validated offline as written); the script puts `$NODE` in as it applies."""
    pin = "s|kubernetes.io/hostname: NODE$|kubernetes.io/hostname: '\"$NODE\"'|"
    return f"sed '{pin}' {shlex.quote(manifest)} | kubectl -n {shlex.quote(ns)} apply -f -"


def _q(expr: str) -> str:
    return f'promtool query instant "$PROM" {shlex.quote(expr)}'


def _am(alert: str) -> str:
    return f'amtool --alertmanager.url="$AM" alert query alertname={alert}'


def _bench(out: str, pool: PoolSpec, args: str, key: str = "$INHOUSE_API_KEY") -> str:
    """`inhouse bench` against the drilled pool's model: without `--model`, bench asks for the
    first model of `/v1/models`, another pool's where the stack lists it first or the tenant
    may not use this one."""
    model = shlex.quote(pool.client_model_name)
    # NOTE: the key goes in bench's environment, never its argv (`--api-key`), which any user
    # of the host reads in `ps` for as long as the load runs (two weeks for the soak).
    return (
        f'INHOUSE_API_KEY="{key}" inhouse bench --target "$GATEWAY" --model {model} {args} '
        f"--out drill-out/{out} &"
    )
