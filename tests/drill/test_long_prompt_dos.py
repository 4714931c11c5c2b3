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


def test_a_flood_request_cut_mid_stream_is_a_failure() -> None:
    # "flood held by the tenant's limits" wants no failure but 429s: a flood request cut
    # mid-stream (an engine that died under the flood) counted as admitted, not as a failure.
    from inhouse.bench.metrics import Outcome, RequestResult
    from inhouse.drill.drills.long_prompt_dos import _check_flood
    from inhouse.drill.stack import drill_stack
    from inhouse.launch.demo import demo_stack

    def request(i: int, status: int, chunks: int, cut: bool = False) -> RequestResult:
        outcome = Outcome(i, 0.0, t_send=float(i), success=status == 200 and not cut,
                          status=status, num_chunks=chunks)  # fmt: skip
        outcome.error = "error event: engine gone" if cut else ""
        return RequestResult(outcome, f"r{i}", 32_000)

    stack, _ = drill_stack(demo_stack(2))
    for flooded, ok in (
        ([request(0, 200, 5), request(1, 429, 0), request(2, 429, 0)], True),
        ([request(0, 200, 5), request(1, 200, 2, cut=True), request(2, 429, 0)], False),
    ):
        result = DrillResult("long-prompt-dos", "now", "test")
        ctx = SimpleNamespace(result=result, stack=SimpleNamespace(stack=stack))
        _check_flood(ctx, flooded, (429, "5"), 60.0)  # type: ignore[arg-type]
        assert result.checks[0].ok is ok, result.checks[0].observed
