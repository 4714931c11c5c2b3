"""Requirements the planner cannot honour are refused by field, never planned around."""

from typing import Any

import pytest

from inhouse.errors import SpecError
from inhouse.plan import make_plan
from inhouse.plan.layout import fallback_larger_than_primary
from inhouse.plan.planner import PlanInfeasibleError

from .plan_helpers import parse, small_requirements


def _chat(data: dict[str, Any]) -> dict[str, Any]:
    workload: dict[str, Any] = data["workloads"][0]
    return workload


def test_an_unknown_allowed_model_is_named_by_field() -> None:
    # "unknown model 'Llama-9-70B'; known: ..." named neither the workload nor the field.
    data = small_requirements()
    _chat(data)["models"]["allowed"] = ["Llama-3.1-8B", "Llama-9-70B"]
    with pytest.raises(SpecError, match=r"workloads\[chat\]\.models\.allowed\[1\]: unknown model"):
        make_plan(parse(data), verify=False)


def test_an_unknown_fallback_model_is_named_by_field() -> None:
    data = small_requirements()
    _chat(data)["models"]["fallback"] = "nope-8B"
    with pytest.raises(SpecError, match=r"workloads\[chat\]\.models\.fallback: unknown model"):
        make_plan(parse(data), verify=False)


def test_a_fallback_model_larger_than_the_primary_is_refused_by_field() -> None:
    # An 8B primary with a 70B fallback planned a TP2 70B pool to cover one lost 8B replica.
    data = small_requirements()
    _chat(data)["models"]["fallback"] = "Llama-3.3-70B"
    with pytest.raises(SpecError) as info:
        make_plan(parse(data), verify=False)
    assert str(info.value) == (
        "small: workloads[chat].models.fallback (Llama-3.3-70B, 70.6B) is larger than "
        "Llama-3.1-8B (8.0B), which models.allowed lets the planner choose for the workload's "
        "own pool: a fallback pool of a larger model costs more than a spare replica of the "
        "primary and serves slower. Name a fallback of at most 8.0B, or drop the smaller models "
        "from models.allowed (or raise models.min_params_b above them)"
    )


@pytest.mark.parametrize(
    ("allowed", "floor", "fallback", "refused_for"),
    [
        (["Llama-3.3-70B", "Llama-3.1-8B"], None, "Qwen3-14B", "Llama-3.1-8B"),
        (["Llama-3.3-70B", "Llama-3.1-8B"], 65, "Qwen3-14B", None),  # the floor drops 8B
        (["Llama-3.1-8B"], None, "Llama-3.1-8B", None),  # as large is not larger
        (["Llama-3.3-70B"], None, "Llama-3.2-1B", None),
    ],
)
def test_a_fallback_is_held_against_every_model_the_planner_may_choose(
    allowed: list[str], floor: float | None, fallback: str, refused_for: str | None
) -> None:
    data = small_requirements()
    _chat(data)["models"] = {"allowed": allowed, "min_params_b": floor, "fallback": fallback}
    why = fallback_larger_than_primary(parse(data).workloads[0])
    if refused_for is None:
        assert why is None
    else:
        assert why is not None and f"is larger than {refused_for} (" in why


def test_a_longest_prompt_past_every_context_is_named_by_field() -> None:
    # max_prompt_tokens 200,000 for a 131,072-token model was "infeasible: pool chat:
    # Llama-3.1-8B: native context 131,072 tokens is shorter than the 204,800 the pool's
    # longest request needs", once per layout, after the workload had been sampled.
    data = small_requirements()
    _chat(data)["max_prompt_tokens"] = 200_000
    with pytest.raises(
        PlanInfeasibleError, match=r"workloads\[chat\]\.max_prompt_tokens \(200,000 tokens\)"
    ):
        make_plan(parse(data), verify=False)


def test_a_fallback_model_that_cannot_serve_the_prompts_is_not_dropped() -> None:
    # phi-4's context is 16,384 tokens, the workload's longest prompt 30,000: no fallback pool
    # could be sized, and the plan went out without one, its memo still saying a lost replica's
    # traffic "goes to the fallback". (phi-4 is larger than the 8B primary, refused first now:
    # Qwen2.5-7B's 32,768 tokens against 40,000 stand in.)
    data = small_requirements()
    _chat(data)["max_prompt_tokens"] = 40_000
    _chat(data)["models"]["fallback"] = "Qwen2.5-7B"
    with pytest.raises(
        PlanInfeasibleError, match=r"workloads\[chat\]\.models\.fallback \(Qwen2.5-7B\)"
    ):
        make_plan(parse(data), verify=False)


def test_a_default_longest_prompt_fits_the_context_it_runs_in() -> None:
    # p95 40,000 with no max_prompt_tokens (the seeds' own "what if the p95 prompt is 40K"):
    # the default longest prompt, 4x the p95 = 160,000 tokens, is past the 131,072-token
    # context, and the plan was "infeasible: native context 131,072 tokens is shorter than the
    # 164,864 the pool's longest request needs", a limit nobody had stated.
    data = small_requirements()
    chat = _chat(data)
    chat["kind"] = "longctx"
    chat.pop("shared_prefix_tokens")
    chat["prompt_tokens"] = {"p50": 6000, "p95": 40_000}
    chat["slo"] = {"e2e_p95_ms": 600_000, "availability": 0.9}
    plan = make_plan(parse(data), verify=False)
    context = 131_072  # Llama-3.1-8B
    output_allowance = 16 * 300  # twice the longest output the generator draws (8x the p95)
    assert plan.requirements.workloads[0].max_prompt_tokens == context - output_allowance
    assert all(pool.choice.max_model_len <= context for pool in plan.chosen.pools)


def test_a_stated_longest_prompt_is_kept() -> None:
    data = small_requirements()
    _chat(data)["max_prompt_tokens"] = 7000
    plan = make_plan(parse(data), verify=False)
    assert plan.requirements.workloads[0].max_prompt_tokens == 7000
