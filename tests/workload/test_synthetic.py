from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.workload import (
    Arrivals,
    FixedWorkload,
    Lengths,
    LongContextWorkload,
    SharedPrefixWorkload,
    UtilityWorkload,
    make_workload,
    workload_names,
    workload_params,
)

from .conftest import drive

BS = 16


def test_utility_calls_share_their_tasks_instruction_prefix() -> None:
    spec = UtilityWorkload(
        arrivals=Arrivals("constant", rate_per_s=10.0), num_tasks=3, instruction_tokens=320
    )
    requests = drive(spec.start(block_size=BS, seed=0, duration_s=10))
    assert len(requests) == 100
    assert [r.arrival_s for r in requests[:3]] == pytest.approx([0.0, 0.1, 0.2])
    heads = {tuple(r.block_hashes[:20]) for r in requests}
    assert len(heads) == 3
    assert {r.num_ideal_cached_tokens for r in requests} == {0, 320}
    assert sum(1 for r in requests if r.num_ideal_cached_tokens == 0) == 3


def test_shared_prefix_groups() -> None:
    spec = SharedPrefixWorkload(
        arrivals=Arrivals("poisson", rate_per_s=20.0), num_groups=4, prefix_tokens=1000
    )
    run = spec.start(block_size=BS, seed=1, duration_s=10)
    requests = drive(run)
    assert {r.num_ideal_cached_tokens for r in requests} == {0, 992}  # 62 full blocks
    assert sum(1 for r in requests if r.num_ideal_cached_tokens == 0) == 4
    assert len({tuple(r.block_hashes[:62]) for r in requests}) == 4
    assert run.reaction_delay_s == float("inf")  # open loop: arrivals ignore completions


def test_longctx_asks_again_about_open_documents() -> None:
    spec = LongContextWorkload(
        arrivals=Arrivals("constant", rate_per_s=1.0),
        prompt=Lengths(20_000, 60_000),
        questions_per_document=4.0,
    )
    requests = drive(spec.start(block_size=BS, seed=2, duration_s=400))
    repeats = [r for r in requests if r.num_ideal_cached_tokens]
    assert 0.65 < len(repeats) / len(requests) < 0.85  # 3 of 4 re-ask
    prompts = sorted(r.num_prompt_tokens for r in requests)
    assert 14_000 < prompts[len(prompts) // 2] < 28_000


def test_fixed_is_a_closed_loop_of_exact_shapes() -> None:
    run = FixedWorkload(concurrency=4, input_tokens=1000, output_tokens=50).start(
        block_size=BS, seed=0, duration_s=20
    )
    requests = drive(run, service_s=5.0)
    assert len(requests) == 16  # 4 clients, one request every 5 s, until 20 s
    assert {(r.num_prompt_tokens, r.output_len) for r in requests} == {(1000, 50)}
    assert sorted({r.arrival_s for r in requests}) == [0.0, 5.0, 10.0, 15.0]
    assert run.theoretical_hit_rate == 0.0


def test_workloads_by_name_with_string_parameters() -> None:
    assert workload_names() == ["agent", "utility", "longctx", "shared-prefix", "fixed"]
    agent = make_workload("agent", {"sessions": "12", "output": "100:300", "think_time_s": "2"})
    assert (agent.sessions, agent.output, agent.think_time_s) == (12, Lengths(100, 300), 2.0)  # type: ignore[attr-defined]
    utility = make_workload(
        "utility", {"arrivals": "gamma", "rate_per_s": "8", "burstiness": "0.5"}
    )
    assert utility.arrivals == Arrivals("gamma", rate_per_s=8.0, burstiness=0.5)  # type: ignore[attr-defined]
    assert workload_params("fixed")["concurrency"] == 16
    with pytest.raises(SpecError, match="has no parameter 'sesions'; it takes: sessions"):
        make_workload("agent", {"sesions": "3"})
    with pytest.raises(SpecError, match="lengths are P50:P95"):
        make_workload("agent", {"output": "lots"})
    with pytest.raises(SpecError, match="unknown; use one of: agent"):
        make_workload("chat")
    with pytest.raises(SpecError, match="arrivals='closed'"):
        make_workload("utility", {"arrivals": "closed"})


@pytest.mark.parametrize(
    ("name", "key"),
    [("agent", "think_time_s"), ("agent", "ramp_s"), ("agent", "min_think_s"),
     ("agent", "session_rate_per_s"), ("longctx", "questions_per_document")],
)  # fmt: skip
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_time_or_rate_that_is_not_a_finite_number_from_0_is_refused(
    name: str, key: str, value: str
) -> None:
    # `-p think_time_s=nan` (or a plan.json's reproduce.bench params, which `inhouse drill`
    # drives) was taken: every session's next turn was due at NaN seconds, and the load
    # silently sent far fewer requests than its sessions asked for.
    with pytest.raises(SpecError, match=f"{key}='{value}' is not valid"):
        make_workload(name, {key: value})
