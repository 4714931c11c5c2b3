"""`inhouse bench` arguments that drive one workload of a plan as the plan's simulator replays
it (plan.json -> `reproduce.simulate`): the playbook's bench step and scripts/reference-run.sh.

`cold=True` is the cold-prefix probe the report reads, run alongside the workload's own run:
`cold_sessions` single-turn sessions, each with a system prompt of its own (`num_apps` = a new
app per session), so every request it sends finds nothing cached while the planned load runs;
labelled `WORKLOAD-cold`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any


def parse_simulate(command: str) -> tuple[str, dict[str, str]]:
    """`inhouse simulate ... --workload KIND -W k=v,... ...` -> (KIND, {k: v}); ValueError when
    it is not such a command."""
    try:
        words = shlex.split(command)
        kind = words[words.index("--workload") + 1]
        params = dict(p.split("=", 1) for p in words[words.index("-W") + 1].split(","))
    except (ValueError, IndexError):
        raise ValueError(
            f"not an `inhouse simulate --workload KIND -W k=v,...` command: {command!r}"
        ) from None
    return kind, params


def bench_args(
    plan: Mapping[str, Any], workload: str, *, cold: bool = False, cold_sessions: int = 6
) -> list[str]:
    kind, params = parse_simulate(plan["reproduce"]["simulate"][workload])
    model = params.pop("model", workload)
    label = f"{workload}-cold" if cold else workload
    args = ["--workload", kind, "--model", model, "--label", label]
    if kind != "agent" and "rate_per_s" in params:
        args += ["--rate", params.pop("rate_per_s")]
    if cold:
        params.update(num_apps="100000", sessions=str(cold_sessions), min_turns="1", max_turns="1")
    for key, value in params.items():
        args += ["-p", f"{key}={value}"]
    return args
