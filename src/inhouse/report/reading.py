"""A measured figure or why there is none (`Reading`, `Gap`), and the reasons every measured row
shares: no run, no request served. `measure.py` re-exports these names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from inhouse.report.figures import Figure
from inhouse.report.inputs import BenchRun

MIN_SAMPLES = 20


class Gap(Enum):
    """What kind of reason a reading without a figure has, for what the report says next."""

    MISSING = "missing"  # no run, or too few requests sent: more of the bench would measure it
    # the runs' requests failed (all, or enough that too few succeeded for a figure though
    # enough were sent): the stack's to fix, not the bench's
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Reading:
    """A measured figure, or why there is none (`why`, of kind `gap` where it is one of
    `Gap`'s; None for any other, e.g. a lighter load or a server setting) and what would
    measure it (`how`), and how many samples it rests on."""

    figure: Figure | None
    why: str = ""
    samples: int | None = None
    how: str = ""
    note: str = ""  # what the reader must know of a figure that is there
    gap: Gap | None = None


NO_RUN = "no bench run of this workload"


def _none(runs: Sequence[BenchRun]) -> Reading:
    """Why the runs give no latency: none (missing), none that served a request (failed), or
    a file without it (no gap: some requests succeeded)."""
    if not runs:
        return Reading(None, NO_RUN, gap=Gap.MISSING)
    if not any(r.get("success") for run in runs for r in run.requests):
        # NOTE: no count here: the text stands as is in the public version, which prints no
        # exact measured figure.
        return Reading(
            None, "no request succeeded: every request of the runs failed", gap=Gap.FAILED
        )
    return Reading(None, "not in result.json")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
