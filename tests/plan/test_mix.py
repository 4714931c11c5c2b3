from __future__ import annotations

import dataclasses

from inhouse.plan.mix import SEPARATOR, MixedWorkload
from inhouse.workload import AgentWorkload, Arrivals, UtilityWorkload

from ..workload.conftest import drive


def parts() -> tuple[tuple[str, object], ...]:
    return (
        ("chat", AgentWorkload(sessions=4)),
        ("utility", UtilityWorkload(arrivals=Arrivals("poisson", rate_per_s=3.0))),
    )


def test_a_mix_issues_each_parts_requests_renamed_with_every_field_kept() -> None:
    mix = MixedWorkload(parts(), priorities=(("utility", 5),))  # type: ignore[arg-type]
    mixed = drive(mix.start(block_size=16, seed=2, duration_s=60))
    alone = {
        name: drive(workload.start(block_size=16, seed=2 * 1000 + index, duration_s=60))  # type: ignore[attr-defined]
        for index, (name, workload) in enumerate(parts())
    }
    assert {r.request_id.split(SEPARATOR)[0] for r in mixed} == {"chat", "utility"}
    # NOTE: the utility part is open-loop, so its requests are the same whatever else runs;
    # each comes out as `dataclasses.replace` would make it (no field left behind).
    utility = [r for r in mixed if r.request_id.startswith("utility/")]
    expected = [
        dataclasses.replace(r, request_id=f"utility/{r.request_id}", priority=5)
        for r in alone["utility"]
    ]
    assert utility == expected
    assert [r.arrival_s for r in mixed] == sorted(r.arrival_s for r in mixed)
    assert all(r.priority == 0 for r in mixed if r.request_id.startswith("chat/"))
