"""long-prompt-dos: "they never reach an engine" judged from the engines' prompt-token counters
read before and after the huge prompts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from inhouse.drill.drills.long_prompt_dos import check_unmoved
from inhouse.drill.evidence import DrillResult


@pytest.mark.parametrize(
    ("before", "after", "ok", "observed"),
    [
        (1200.0, 1200.0, True, "+0 tokens"),
        (1200.0, 201200.0, False, "+200000 tokens"),
        # An engine whose counter could not be read counted as 0 before and after: "+0".
        (None, None, False, "not read from every engine"),
        (1200.0, None, False, "not read from every engine"),
    ],
)
def test_a_counter_not_read_is_not_a_counter_that_did_not_move(
    before: float | None, after: float | None, ok: bool, observed: str
) -> None:
    result = DrillResult("long-prompt-dos", "now", "test")
    check_unmoved(SimpleNamespace(result=result), before, after)  # type: ignore[arg-type]
    (check,) = result.checks
    assert (check.ok, check.observed) == (ok, observed)
