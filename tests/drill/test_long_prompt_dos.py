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


def test_the_huge_prompt_is_past_the_pools_context() -> None:
    # A 200K-token prompt fits the 262,144 tokens of catalog models such as Kimi-K2.5: the
    # gateway rightly served it, and the drill (and drill plan's curl) failed or loaded a
    # production engine with three huge prefills instead of testing the refusal.
    from inhouse.drill.drills.long_prompt_dos import huge_tokens
    from inhouse.drill.prodsteps import default_agent_load, drill_steps
    from inhouse.launch.demo import demo_stack
    from inhouse.render.alerts_triggers import max_model_len

    stack = demo_stack(2)
    assert huge_tokens(stack.pools[0]) == 200_000  # the demo's 70B: 200K is past it
    pool = stack.pools[0]
    knobs = pool.knobs.model_copy(update={"max_model_len": None})  # the model's own context
    long = pool.model_copy(update={"model": "Kimi-K2.5", "knobs": knobs})
    assert max_model_len(long) == 262_144 and huge_tokens(long) == 327_680
    wide = stack.model_copy(update={"pools": [long, *stack.pools[1:]]})
    (first, _) = drill_steps("long-prompt-dos", wide, "ns", default_agent_load())
    assert '"word " * 327680' in first.shell
