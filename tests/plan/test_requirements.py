import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from inhouse.errors import SpecError
from inhouse.plan.requirements import (
    MAX_CHECK_DURATION_S,
    MAX_LOAD_MULTIPLE,
    MAX_RATE_PER_S,
    MultiTurn,
    parse_requirements,
)
from inhouse.plan.traffic import profile_workload

from .plan_helpers import parse, small_requirements

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["crm-copilot", "code-assistant"])
def test_examples_parse(name: str) -> None:
    path = ROOT / "examples" / name / "requirements.yaml"
    req = parse_requirements(yaml.safe_load(path.read_text()), str(path))
    assert req.name == name


def test_code_assistant_example_states_the_brief() -> None:
    path = ROOT / "examples" / "code-assistant" / "requirements.yaml"
    req = parse_requirements(yaml.safe_load(path.read_text()))
    code = req.workload("code")
    assert (code.traffic.rate_per_s("peak"), code.traffic.rate_per_s("avg")) == (12, 3)
    assert code.prompt_tokens is not None
    assert (code.prompt_tokens.p50, code.prompt_tokens.p95) == (6000, 24000)
    assert (code.output_tokens.p50, code.output_tokens.p95) == (250, 900)
    assert (code.slo.ttft_p95_ms, code.slo.tpot_p95_ms, code.slo.availability) == (1200, 50, 0.999)
    assert code.models.fallback == "Llama-3.1-8B"
    assert {h.gpu for h in req.hardware} == {"h100_sxm", "h200_sxm"}


def test_crm_example_states_the_seed_scenario() -> None:
    path = ROOT / "examples" / "crm-copilot" / "requirements.yaml"
    req = parse_requirements(yaml.safe_load(path.read_text()))
    chat, utility = req.workload("chat"), req.workload("utility")
    assert chat.traffic.sessions("peak") == 100
    assert (chat.slo.ttft_p95_ms, chat.slo.itl_p95_ms) == (800, 60)
    assert 0.75 <= chat.prefix_reuse <= 0.9
    assert utility.traffic.rate_per_s("peak") == pytest.approx(1000 / 60)
    assert utility.slo.e2e_p95_ms == 2000
    (node,) = req.hardware
    assert (node.gpu, node.gpus_per_node, node.max_nodes, node.capex_usd_per_node) == (
        "h100_sxm",
        8,
        1,
        300_000,
    )


def test_unknown_field_is_named() -> None:
    data = small_requirements()
    data["workloads"][0]["promt_tokens"] = {"p50": 1, "p95": 2}
    with pytest.raises(SpecError, match=r"workloads\.0\.promt_tokens: unknown field") as caught:
        parse(data)
    # a requirements file's fields are documented in docs/plan.md, not docs/stack.md
    assert "docs/plan.md" in str(caught.value) and "docs/stack.md" not in str(caught.value)


def test_traffic_needs_one_form() -> None:
    data = small_requirements()
    data["workloads"][0]["traffic"] = {"avg_per_s": 1.0, "peak_sessions": 3}
    with pytest.raises(SpecError, match="exactly one of"):
        parse(data)


def test_wrong_version_is_refused() -> None:
    with pytest.raises(SpecError, match="version: 2 is not supported"):
        parse({**small_requirements(), "version": 2})


def test_heavier_prompt_tail_keeps_the_median() -> None:
    profile = profile_workload(parse(small_requirements()).workloads[0])
    heavier = profile.scaled(prompt_p95_factor=1.7)
    assert heavier.quantile("prompt", 0.5) == pytest.approx(
        profile.quantile("prompt", 0.5), rel=0.01
    )
    assert heavier.quantile("prompt", 0.95) == pytest.approx(
        1.7 * profile.quantile("prompt", 0.95), rel=0.03
    )
    halved = profile.scaled(hit_factor=0.5)
    assert halved.expected_hit_rate == pytest.approx(profile.expected_hit_rate / 2)


def test_an_infinite_peak_and_a_boolean_count_are_refused_by_field() -> None:
    # `.inf` passed `gt=0` (`inhouse plan` then died on a NaN: a ValueError traceback) and
    # `yes` was read as 1 GPU per node.
    data = small_requirements()
    data["workloads"][0]["traffic"] = {"avg_per_s": 1, "peak_per_s": float("inf")}
    data["hardware"][0]["gpus_per_node"] = True
    with pytest.raises(SpecError) as info:
        parse_requirements(data, "req.yaml")
    message = str(info.value)
    assert "workloads.0.traffic.peak_per_s: Input should be a finite number" in message
    assert "hardware.0.gpus_per_node: Value error, true is a boolean" in message


@pytest.mark.parametrize(
    ("slo", "expected"),
    [
        # Was a pydantic traceback from the stack's SLO, after the whole search had run.
        (
            {"ttft_p95_ms": 1000, "ttft_alarm_ms": 500},
            "workloads.0.slo: Value error, ttft_alarm_ms (500) is below ttft_p95_ms (1000)",
        ),
        # Was dropped without a word: no target, so nothing ever paged at 80 ms.
        (
            {"ttft_p95_ms": 1000, "itl_alarm_ms": 80},
            "workloads.0.slo: Value error, itl_alarm_ms (80) has no itl_p95_ms target",
        ),
    ],
)
def test_an_alarm_below_its_target_or_without_one_is_refused(
    slo: dict[str, float], expected: str
) -> None:
    data = small_requirements()
    data["workloads"][0]["slo"] = slo
    with pytest.raises(SpecError) as info:
        parse(data)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("knob", "value", "expected"),
    [
        # Tracebacks: a ZeroDivisionError, a pydantic error from the stack.
        ("tensor_parallel", [0], "planning.tensor_parallel.0: Input should be greater than 0"),
        (
            "max_num_batched_tokens",
            [-5],
            "planning.max_num_batched_tokens.0: Input should be greater than 0",
        ),
        # Empty lists were "infeasible: no GPU on offer fits the model" (exit 3).
        ("tensor_parallel", [], "planning.tensor_parallel: Tuple should have at least 1 item"),
        ("quantizations", [], "planning.quantizations: Tuple should have at least 1 item"),
        ("kv_cache_dtypes", [], "planning.kv_cache_dtypes: Tuple should have at least 1 item"),
        (
            "max_num_batched_tokens",
            [],
            "planning.max_num_batched_tokens: Tuple should have at least 1 item",
        ),
        # Unknown names were refused without the field's name.
        ("quantizations", ["fp9"], "planning.quantizations: Value error, unknown quantization"),
        ("kv_cache_dtypes", ["int3"], "planning.kv_cache_dtypes: Value error, unknown kv cache"),
        # "rate scale must be positive, got 0.0", from the simulator.
        ("load_multiples", [1, 0], "planning.load_multiples.1: Input should be greater than 0"),
    ],
)
def test_planning_lists_need_items_and_sensible_values(
    knob: str, value: list[object], expected: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse(small_requirements(**{knob: value}))
    assert expected in str(info.value)


def test_one_offer_per_gpu_type_and_one_price_per_api_name() -> None:
    # The planner keys both by name: the second H100 offer replaced the first ($3/GPU-h was
    # planned at $2 without a word), the second API price the first.
    data = small_requirements()
    data["hardware"] = [
        {"gpu": "h100_sxm", "pricing": "hourly", "usd_per_gpu_hour": 3.0},
        {"gpu": "H100-SXM", "pricing": "hourly", "usd_per_gpu_hour": 2.0},
    ]
    data["api_prices"] *= 2
    with pytest.raises(SpecError) as info:
        parse(data)
    message = str(info.value)
    assert "hardware: Value error, h100_sxm is offered more than once" in message
    assert "api_prices: Value error, api is named more than once" in message


def test_an_unknown_gpu_names_its_field() -> None:
    data = small_requirements()
    data["hardware"][0]["gpu"] = "h999"
    with pytest.raises(SpecError, match=r"hardware\.0\.gpu: Value error, unknown GPU 'h999'"):
        parse(data)


def test_a_longest_prompt_below_the_p95_is_refused() -> None:
    # Was raised to the p95 (3,000) without a word: the stack's max_model_len
    # ignored the 100 the file stated.
    data = small_requirements()
    data["workloads"][0]["max_prompt_tokens"] = 100
    with pytest.raises(SpecError) as info:
        parse(data)
    assert (
        "workloads.0: Value error, max_prompt_tokens (100) is below prompt_tokens.p95 (3000)"
        in (str(info.value))
    )


def test_an_agent_longest_prompt_below_what_its_sessions_send_is_refused() -> None:
    data = small_requirements()
    data["workloads"][0] = {
        "name": "chat",
        "kind": "agent",
        "traffic": {"avg_sessions": 5, "peak_sessions": 10},
        "multi_turn": {"system_prompt_tokens": 2000, "min_turns": 1, "max_turns": 1},
        "max_prompt_tokens": 1000,
        "output_tokens": {"p50": 100, "p95": 300},
        "slo": {"ttft_p95_ms": 1000},
        "models": {"allowed": ["Llama-3.1-8B"]},
    }
    req = parse(data).workloads[0]
    # Every first turn is the 2,000-token system prompt plus a message: none fits in 1,000.
    with pytest.raises(SpecError, match=r"workloads\[chat\]\.max_prompt_tokens \(1,000\) is below"):
        profile_workload(req)
    stated = req.model_copy(update={"max_prompt_tokens": None})
    longest = profile_workload(stated).max_prompt_tokens
    assert (
        profile_workload(req.model_copy(update={"max_prompt_tokens": longest})).max_prompt_tokens
        == longest
    )


def test_an_agent_without_multi_turn_takes_the_documented_defaults() -> None:
    # docs/plan.md: `multi_turn` defaults to the agents' defaults; it was an AssertionError
    # traceback while characterizing.
    data = small_requirements()
    data["workloads"][0] = {
        "name": "chat",
        "kind": "agent",
        "traffic": {"avg_sessions": 5, "peak_sessions": 10},
        "output_tokens": {"p50": 100, "p95": 300},
        "slo": {"ttft_p95_ms": 1000},
        "models": {"allowed": ["Llama-3.1-8B"]},
    }
    req = parse(data).workloads[0]
    assert req.multi_turn == MultiTurn()
    profile = profile_workload(req)
    # Every prompt carries one of the default 6,000-token system prompts.
    assert profile.shapes.prompt.min() >= 6000


def test_counts_the_generators_build_up_front_are_bounded() -> None:
    # Each hung `inhouse plan` (a billion prefix groups, apps or sessions built one by one).
    data = small_requirements()
    data["workloads"][0]["num_prefix_groups"] = 10**9
    agent = {
        "name": "agent",
        "kind": "agent",
        "traffic": {"avg_sessions": 10**7, "peak_sessions": 10**7},
        "multi_turn": {"num_apps": 10**9},
        "output_tokens": {"p50": 100, "p95": 300},
        "slo": {"ttft_p95_ms": 1000},
        "models": {"allowed": ["Llama-3.1-8B"]},
    }
    data["workloads"].append(agent)
    with pytest.raises(SpecError) as info:
        parse(data)
    message = str(info.value)
    for field in (
        "workloads.0.num_prefix_groups",
        "workloads.1.traffic.peak_sessions",
        "workloads.1.multi_turn.num_apps",
    ):
        assert f"{field}: Input should be less than or equal to 100000" in message


def test_a_share_written_as_a_percentage_gets_the_share_in_its_message() -> None:
    # Was "Input should be less than 1", which does not say what to write.
    data = small_requirements()
    data["workloads"][0]["slo"]["availability"] = 99.9
    data["workloads"][0]["prefix_reuse"] = 85
    data["hardware"][0]["avg_power_fraction"] = 70
    with pytest.raises(SpecError) as info:
        parse(data)
    message = str(info.value)
    assert "workloads.0.slo.availability: Value error, 99.9 reads as a percentage" in message
    assert "(0.999)" in message
    assert "workloads.0.prefix_reuse: Value error, 85 reads as a percentage" in message
    assert "hardware.0.avg_power_fraction: Value error, 70 reads as a percentage" in message


def test_a_shared_prefix_longer_than_the_median_prompt_is_refused() -> None:
    # The generator cut it to the p50 while the KV working set counted it whole (4 x 1e9
    # tokens: "kv utilization 1.00 > 0.90" on every configuration).
    data = small_requirements()
    data["workloads"][0]["shared_prefix_tokens"] = 10**9
    with pytest.raises(SpecError, match=r"shared_prefix_tokens \(1000000000\) is not below"):
        parse(data)


def test_an_inter_token_target_for_one_token_answers_is_refused() -> None:
    # Nothing to measure: the simulator's ITL p95 was NaN and the plan "infeasible" unexplained.
    data = small_requirements()
    data["workloads"][0]["output_tokens"] = {"p50": 1, "p95": 1}
    with pytest.raises(SpecError, match="itl_p95_ms needs answers of two tokens or more"):
        parse(data)


def test_active_hours_past_the_cost_sheets_month_are_refused() -> None:
    # 24 h x 31 d = 744 h of traffic (and API spend) against a stack paid for 730 h.
    data = small_requirements()
    data["usage"] = {"active_hours_per_day": 24, "active_days_per_month": 31}
    with pytest.raises(SpecError, match=r"usage: Value error, active_hours_per_day x active_days"):
        parse(data)
    data["usage"] = {"active_hours_per_day": 24, "active_days_per_month": 30.4}
    assert parse(data).usage.active_hours_per_month == pytest.approx(729.6)


def test_load_multiples_and_check_durations_past_their_bounds_are_refused_by_field() -> None:
    # `load_multiples: [1, 1e6]` simulated a million times the traffic (300x took two minutes);
    # a duration of 1e9 s simulated for ever.
    data = small_requirements(
        load_multiples=[1, 1e6], verify_duration_s=1e9, stress_duration_s=MAX_CHECK_DURATION_S * 2
    )
    with pytest.raises(SpecError) as info:
        parse(data)
    message = str(info.value)
    assert "planning.load_multiples.1: Value error, 1e+06x peak is past the 10x" in message
    assert f"use at most {MAX_LOAD_MULTIPLE:g}" in message
    for field in ("verify_duration_s", "stress_duration_s"):
        assert f"planning.{field}: Value error" in message
    assert message.count(f"use at most {MAX_CHECK_DURATION_S:g}") == 2


def test_the_bounds_themselves_are_allowed() -> None:
    planning = parse(
        small_requirements(
            load_multiples=[1, MAX_LOAD_MULTIPLE],
            verify_duration_s=MAX_CHECK_DURATION_S,
            stress_duration_s=MAX_CHECK_DURATION_S,
        )
    ).planning
    assert planning.load_multiples == (1.0, MAX_LOAD_MULTIPLE)
    assert planning.verify_duration_s == planning.stress_duration_s == MAX_CHECK_DURATION_S


def test_longer_output_tail_keeps_the_median_and_the_prompts() -> None:
    # Section 7 re-forecast longer prompts but not longer answers: the profile could not
    # even state them.
    profile = profile_workload(parse(small_requirements()).workloads[0])
    longer = profile.scaled(output_p95_factor=1.7)
    assert longer.quantile("output", 0.5) == pytest.approx(
        profile.quantile("output", 0.5), rel=0.02
    )
    assert longer.quantile("output", 0.95) == pytest.approx(
        1.7 * profile.quantile("output", 0.95), rel=0.03
    )
    assert (longer.shapes.prompt == profile.shapes.prompt).all()
    assert longer.expected_hit_rate == pytest.approx(profile.expected_hit_rate)


def test_unknown_routing_policy_is_named_before_planning() -> None:
    # It was read only when the simulator built the router, without the field, and never under
    # --no-verify: the plan wrote a stack.yaml with the unknown policy in it.
    with pytest.raises(
        SpecError, match=r"planning\.routing_policy: .*'bogus' is not a routing policy.*cache_aware"
    ):
        parse(small_requirements(routing_policy="bogus"))


def test_every_known_routing_policy_parses() -> None:
    assert parse(small_requirements(routing_policy="round_robin")).planning.routing_policy == (
        "round_robin"
    )


def _capex_offer(**fields: float) -> dict[str, object]:
    return {"gpu": "h100_sxm", "pricing": "capex", "capex_usd_per_node": 300_000, **fields}


@pytest.mark.parametrize(
    ("offer", "field"),
    [
        (_capex_offer(pue=1e308), "hardware.0.pue"),
        (_capex_offer(usd_per_kwh=1e308), "hardware.0.usd_per_kwh"),
        (_capex_offer(power_kw_per_node=1e308), "hardware.0.power_kw_per_node"),
        (_capex_offer(ops_usd_per_node_year=1e308), "hardware.0.ops_usd_per_node_year"),
        (_capex_offer(capex_usd_per_node=1e308), "hardware.0.capex_usd_per_node"),
        (
            {"gpu": "h100_sxm", "pricing": "hourly", "usd_per_gpu_hour": 1e308},
            "hardware.0.usd_per_gpu_hour",
        ),
    ],
)
def test_a_price_past_any_real_one_is_refused_by_field(
    offer: dict[str, object], field: str
) -> None:
    # pue, $/kWh or rent of 1e308 overflowed the node's $/h to infinity: a traceback from the
    # stack file's model after the search; capex 1e308 was a plan priced with 300 digits.
    data = small_requirements()
    data["hardware"] = [offer]
    with pytest.raises(SpecError, match=rf"{re.escape(field)}: .*far past any real one"):
        parse(data)


def test_an_api_price_past_any_real_one_is_refused_by_field() -> None:
    data = small_requirements()
    data["api_prices"][0]["output_usd_per_million"] = 1e308
    with pytest.raises(SpecError, match=r"api_prices\.0\.output_usd_per_million: .*stray digits"):
        parse(data)


def test_amortization_under_a_month_is_refused_by_field() -> None:
    # 1e-300 years priced a node at 1e305 $/h, without a word.
    data = small_requirements()
    data["hardware"] = [_capex_offer(amortization_years=1e-300)]
    with pytest.raises(SpecError, match=r"hardware\.0\.amortization_years: .*less than a month"):
        parse(data)


def test_the_examples_prices_are_under_the_ceilings() -> None:
    for name in ("crm-copilot", "code-assistant"):
        path = ROOT / "examples" / name / "requirements.yaml"
        assert parse_requirements(yaml.safe_load(path.read_text()), str(path)).hardware


@pytest.mark.parametrize("pricing", ["capex", "hourly"])
def test_a_node_past_the_largest_is_refused_by_field(pricing: str) -> None:
    # On an owned node the spare GPUs become extra replicas one by one: a billion GPUs a node
    # hung `inhouse plan`.
    data = small_requirements()
    offer = _capex_offer() if pricing == "capex" else data["hardware"][0]
    data["hardware"] = [{**offer, "gpus_per_node": 1_000_000_000}]
    with pytest.raises(SpecError, match=r"hardware\.0\.gpus_per_node: .*GB200 NVL72.*max_nodes"):
        parse(data)


def test_a_rack_of_72_gpus_is_a_node() -> None:
    data = small_requirements()
    data["hardware"] = [{**data["hardware"][0], "gpus_per_node": 72}]
    assert parse(data).hardware[0].gpus_per_node == 72


def test_a_think_time_past_the_longest_check_is_refused_by_field() -> None:
    # 1e300 s planned with no second turn ever and $/request 1.7e296.
    data = small_requirements()
    data["workloads"][0] = {
        "name": "chat",
        "kind": "agent",
        "traffic": {"avg_sessions": 10, "peak_sessions": 20},
        "multi_turn": {"think_time_s": 1e300},
        "output_tokens": {"p50": 10, "p95": 20},
        "slo": {"ttft_p95_ms": 1000},
        "models": {"allowed": ["Llama-3.1-8B"]},
    }
    with pytest.raises(
        SpecError, match=r"workloads\.0\.multi_turn\.think_time_s: .*more than the 3600 s"
    ):
        parse(data)
    data["workloads"][0]["multi_turn"]["think_time_s"] = MAX_CHECK_DURATION_S
    assert parse(data).workloads[0].multi_turn == MultiTurn(think_time_s=MAX_CHECK_DURATION_S)


@pytest.mark.parametrize("metric", ["ttft", "itl"])
def test_a_degraded_target_below_the_normal_one_is_refused_by_field(metric: str) -> None:
    # Swapped targets planned without a word, sized for the stricter one with a replica lost.
    data = small_requirements()
    normal = data["workloads"][0]["slo"][f"{metric}_p95_ms"]
    data["workloads"][0]["degraded_slo"] = {f"{metric}_p95_ms": normal / 2}
    with pytest.raises(
        SpecError, match=rf"degraded_slo\.{metric}_p95_ms \(.*\) is below slo\.{metric}_p95_ms"
    ):
        parse(data)
    data["workloads"][0]["degraded_slo"] = {f"{metric}_p95_ms": normal}
    assert parse(data).workloads[0].degraded_slo is not None


@pytest.mark.parametrize("shape", [1e-300, 1e-6, 0.001])
def test_a_burstiness_near_zero_is_refused_by_field(shape: float) -> None:
    # Its failures named other knobs: verify_duration_s, load_multiples, or a 300-digit TTFT.
    data = small_requirements()
    data["workloads"][0]["burstiness"] = shape
    with pytest.raises(SpecError, match=r"workloads\.0\.burstiness: .*use at least 0\.01"):
        parse(data)


def test_a_burstiness_of_a_hundredth_parses() -> None:
    data = small_requirements()
    data["workloads"][0]["burstiness"] = 0.01
    assert parse(data).workloads[0].burstiness == 0.01


@pytest.mark.parametrize("name", ["a|b", "a\nc; rm -rf /", "tab\there", "", "  "])
def test_an_api_name_that_breaks_the_memo_table_is_refused_by_field(name: str) -> None:
    # A `|` or a line break split the memo's API table row; an empty name left a blank cell.
    data = small_requirements()
    data["api_prices"][0]["name"] = name
    with pytest.raises(SpecError, match=r"api_prices\.0\.name: .*not a one-line name"):
        parse(data)


def test_an_api_name_with_spaces_and_unicode_parses() -> None:
    data = small_requirements()
    data["api_prices"][0]["name"] = "GPT-4.1 mini (list price, €)"
    assert parse(data).api_prices[0].name == "GPT-4.1 mini (list price, €)"


def test_a_quoted_version_is_named_as_a_string() -> None:
    # It read "version: '1' is not supported; this inhouse reads version 1".
    data = small_requirements()
    data["version"] = "1"
    with pytest.raises(SpecError, match=r"version: '1' is a string; write the number, unquoted"):
        parse(data)


def _lora_workloads(links: dict[str, str | None]) -> dict[str, Any]:
    data = small_requirements()
    base = data["workloads"][0]
    data["workloads"] = [
        {
            **base,
            "name": name,
            "models": {"allowed": ["Llama-3.1-8B"], **({"lora_on": on} if on else {})},
        }
        for name, on in links.items()
    ]
    return data


@pytest.mark.parametrize(
    "links", [{"a": "b", "b": "a"}, {"a": "b", "b": "c", "c": None}], ids=["cycle", "chain"]
)
def test_lora_on_a_workload_that_is_itself_lora_on_is_refused_by_field(
    links: dict[str, str | None],
) -> None:
    # Both planned, then were a traceback from the stack's model (exit 1).
    with pytest.raises(SpecError, match=r"workload 'a': lora_on 'b', which is itself lora_on"):
        parse(_lora_workloads(links))


def test_two_workloads_lora_on_one_parse() -> None:
    req = parse(_lora_workloads({"a": "c", "b": "c", "c": None}))
    assert [w.models.lora_on for w in req.workloads] == ["c", "c", None]


@pytest.mark.parametrize("suffix", ["-long", "-fallback"])
def test_a_workload_named_as_another_ones_pool_is_refused(suffix: str) -> None:
    # `a` and `a-fallback` planned, then were a traceback from the stack's model.
    data = small_requirements()
    base = data["workloads"][0]
    base["models"]["fallback"] = "Llama-3.1-8B"
    data["workloads"] = [base, {**base, "name": f"chat{suffix}"}]
    with pytest.raises(
        SpecError,
        match=rf"workload 'chat{suffix}' is the name the planner gives .* of workload 'chat'",
    ):
        parse(data)


@pytest.mark.parametrize(
    ("suffix", "kind", "fallback"),
    [("-long", "utility", None), ("-fallback", "shared-prefix", None)],
)
def test_a_name_the_planner_cannot_give_a_pool_of_the_other_parses(
    suffix: str, kind: str, fallback: str | None
) -> None:
    # A utility (or agent) workload is never split by length, and one without models.fallback
    # gets no fallback pool: `docs` beside `docs-long` planned before, and must still.
    data = small_requirements()
    base = data["workloads"][0]
    owner = {**base, "kind": kind, "models": {**base["models"], "fallback": fallback}}
    if kind != "shared-prefix":
        owner.pop("shared_prefix_tokens")
    data["workloads"] = [owner, {**base, "name": f"chat{suffix}"}]
    assert [w.name for w in parse(data).workloads] == ["chat", f"chat{suffix}"]


def test_a_workload_named_long_alone_parses() -> None:
    data = small_requirements()
    data["workloads"][0]["name"] = "chat-long"
    assert parse(data).workloads[0].name == "chat-long"


def test_a_fallback_beside_lora_on_is_refused() -> None:
    # The LoRA layout dropped the fallback pool without a word.
    data = _lora_workloads({"a": "c", "c": None})
    data["workloads"][0]["models"]["fallback"] = "Llama-3.2-1B"
    with pytest.raises(SpecError, match=r"workload 'a': models\.fallback and models\.lora_on"):
        parse(data)
    data["workloads"][0]["models"].pop("lora_on")
    assert parse(data).workloads[0].models.fallback == "Llama-3.2-1B"


def test_a_cold_ttft_target_below_the_normal_one_is_refused_by_field() -> None:
    # Swapped targets were reported, never met, with nothing said at planning.
    data = small_requirements()
    data["workloads"][0]["slo"]["ttft_cold_p95_ms"] = 10
    with pytest.raises(
        SpecError, match=r"workloads\.0\.slo: .*ttft_cold_p95_ms \(10\) is below ttft_p95_ms"
    ):
        parse(data)
    data["workloads"][0]["slo"]["ttft_cold_p95_ms"] = data["workloads"][0]["slo"]["ttft_p95_ms"]
    assert parse(data).workloads[0].slo.ttft_cold_p95_ms is not None


@pytest.mark.parametrize(
    ("traffic", "field", "shown"),
    [
        ({"avg_per_s": 1, "peak_per_s": 1e12}, "peak_per_s", "1e+12 requests a second"),
        ({"avg_per_min": 1, "peak_per_min": 1e9}, "peak_per_min", "1e+09 requests a minute"),
    ],
)
def test_a_rate_past_what_any_plan_sizes_is_refused_by_field(
    traffic: dict[str, float], field: str, shown: str
) -> None:
    # peak_per_s 1e12 planned on to "prefill alone needs 97440273% of the replica with 0.01%
    # of the peak traffic on a replica".
    data = small_requirements()
    data["workloads"][0]["traffic"] = traffic
    with pytest.raises(SpecError) as info:
        parse_requirements(data, "req.yaml")
    message = str(info.value)
    assert f"workloads.0.traffic.{field}: Value error, {shown} is more than the" in message
    assert "check the digits and the unit" in message


def test_the_highest_plannable_rate_parses() -> None:
    data = small_requirements()
    data["workloads"][0]["traffic"] = {"avg_per_s": 1, "peak_per_s": MAX_RATE_PER_S}
    assert parse_requirements(data, "req.yaml").workloads[0].traffic.rate_per_s("peak") == 1e6
    data["workloads"][0]["traffic"] = {"avg_per_min": 1, "peak_per_min": 60 * MAX_RATE_PER_S}
    parse_requirements(data, "req.yaml")
