"""The public version's inputs: the same files, cited by neutral names.

The internal version cites each file as the command line gave it (`/data/acme-bank/bench/chat/
result.json`), and a path can name the customer where no name list would catch it. The public
version cites every file by what it is: `plan/plan.json`, `plan/stack.yaml`,
`plan/compare.json`, `bench/W/result.json` and `requests.jsonl` (W: the plan workload the run
measured, `W-cold` for a cold probe, `run` for none; `-2`, `-3` for a second and third run of
one), `drills/NAME/evidence.json` (NAME: the drill, when it is one of the seven) and `deploy/`
for the render output. Every figure's source is built from these names, so the appendix, the
SLO table, the bench report and the drill table all cite the same neutral files.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from inhouse.report.inputs import DRILLS, BenchRun, Doc, Drills, ReportInputs

DRILL_NAMES = frozenset(name for name, _ in DRILLS)


def _bench_names(inputs: ReportInputs) -> list[str]:
    names = inputs.workload_names
    seen: Counter[str] = Counter()
    out = []
    for run in inputs.benches:
        workload = run.workload(names)
        base = "run" if workload is None else workload + ("-cold" if run.is_cold_probe else "")
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def _benches(inputs: ReportInputs) -> tuple[BenchRun, ...]:
    return tuple(
        replace(
            run,
            name=name,
            result=Doc(f"bench/{name}/result.json", run.result.data),
            requests_file=f"bench/{name}/requests.jsonl",
        )
        for run, name in zip(inputs.benches, _bench_names(inputs), strict=True)
    )


def _drills(drills: Drills | None) -> Drills | None:
    if drills is None:
        return None
    runs = []
    for i, run in enumerate(drills.runs, start=1):
        drill = run.evidence.get("drill")
        name = drill if isinstance(drill, str) and drill in DRILL_NAMES else f"drill-{i}"
        runs.append(
            replace(
                run,
                name=name,
                evidence=Doc(f"drills/{name}/evidence.json", run.evidence.data),
                timeline_file=None,  # the public version shows no chart of measured values
            )
        )
    summary = drills.summary
    return Drills(
        "drills",
        None if summary is None else Doc("drills/summary.json", summary.data),
        tuple(runs),
    )


def public_inputs(inputs: ReportInputs) -> ReportInputs:
    """`inputs` with every file named as the public version cites it (module docstring)."""
    compare = inputs.compare
    return replace(
        inputs,
        plan=Doc("plan/plan.json", inputs.plan.data),
        stack=Doc("plan/stack.yaml", inputs.stack.data),
        benches=_benches(inputs),
        drills=_drills(inputs.drills),
        render=None if inputs.render is None else replace(inputs.render, directory="deploy"),
        compare=None if compare is None else Doc("plan/compare.json", compare.data),
        images={},
    )
