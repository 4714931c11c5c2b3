from pathlib import Path

import pytest

from inhouse.errors import SpecError
from inhouse.spec.load import load_stack
from inhouse.spec.stack import dump_stack, parse_stack

ROOT = Path(__file__).resolve().parents[2]


def minimal(**pool: object) -> dict[str, object]:
    return {
        "version": 1,
        "name": "demo",
        "pools": [{"name": "chat", "model": "Llama-3.1-8B", **pool}],
    }


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*/stack.yaml")))
def test_examples_load_and_round_trip(example: Path) -> None:
    stack = load_stack(example)
    assert parse_stack(__import__("yaml").safe_load(dump_stack(stack))) == stack


def test_crm_example_is_two_tp4_replicas_on_the_nvlink_halves() -> None:
    stack = load_stack(ROOT / "examples" / "crm-copilot" / "stack.yaml")
    chat = stack.pool("chat")
    assert (chat.tp, chat.replicas, chat.quant) == (4, 2, "fp8")
    assert chat.gpu_ids == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert stack.pool_for_model("utility-summarize") is chat


def test_unknown_field_names_the_field_and_the_fix() -> None:
    with pytest.raises(SpecError, match=r"pools\.0\.replics: unknown field"):
        parse_stack(minimal(replics=2))


def test_bad_value_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"pools\.0\.tp"):
        parse_stack(minimal(tp=0))
    with pytest.raises(SpecError, match=r"pools\.0\.knobs\.scheduling_policy"):
        parse_stack(minimal(knobs={"scheduling_policy": "lifo"}))


def test_references_must_name_pools() -> None:
    with pytest.raises(SpecError, match="fallback 'small' is not a pool"):
        parse_stack(minimal(fallback="small"))
    with pytest.raises(SpecError, match="long_pool needs long_prompt_tokens"):
        data = minimal(long_pool="chat")
        parse_stack(data)


@pytest.mark.parametrize("field", ["fallback", "long_pool"])
def test_a_pool_cannot_be_its_own_fallback_or_long_pool(field: str) -> None:
    with pytest.raises(SpecError, match=f"{field} names the pool itself"):
        parse_stack(minimal(long_prompt_tokens=8000, **{field: "chat"}))


def test_pools_may_fall_back_on_each_other() -> None:
    data = minimal(fallback="spare")
    spare = {"name": "spare", "model": "Llama-3.1-8B", "served_model_name": "spare"}
    data["pools"].append({**spare, "fallback": "chat"})  # type: ignore[attr-defined]
    assert parse_stack(data).pool("spare").fallback == "chat"  # one hop: a pair is a backup pair


def test_served_names_may_be_hugging_face_ids_or_ollama_tags() -> None:
    pool = parse_stack(minimal(served_model_name="org/Chat-1.5_b", aliases=["llama3.1:8b"]))
    assert pool.pools[0].model_names == ("org/Chat-1.5_b", "llama3.1:8b")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("served_model_name", 'chat"} or vector(1) #'),
        ("served_model_name", "../chat"),
        ("aliases", ["chat 70b"]),
        ("lora_adapters", ["../../etc/x"]),
        ("lora_adapters", ["org/adapter"]),
    ],
)
def test_model_names_cannot_break_promql_or_paths(field: str, value: object) -> None:
    # The names become PromQL label values in the alerts and LoRA directories in the pods.
    with pytest.raises(SpecError, match=r"is not valid"):
        parse_stack(minimal(**{field: value}))


def test_url_engines_need_one_url_per_replica() -> None:
    with pytest.raises(SpecError, match="one entry in urls per replica"):
        parse_stack(minimal(engine="url", replicas=2, urls=["http://127.0.0.1:8001"]))


def test_gpu_groups_must_match_tp() -> None:
    with pytest.raises(SpecError, match="each gpu_ids group needs tp=2"):
        parse_stack(minimal(tp=2, replicas=1, gpu_ids=[[0, 1, 2]]))


def test_a_model_name_cannot_be_served_by_two_pools() -> None:
    data = minimal(served_model_name="m")
    data["pools"].append({"name": "other", "model": "Llama-3.1-8B", "aliases": ["m"]})  # type: ignore[attr-defined]
    with pytest.raises(SpecError, match="served by both"):
        parse_stack(data)


def test_unsupported_version_says_which_is_supported() -> None:
    with pytest.raises(
        SpecError, match="version: 2 is not supported; this inhouse reads version 1"
    ):
        parse_stack({**minimal(), "version": 2})


def test_missing_file_and_bad_yaml_are_clear(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read stack file"):
        load_stack(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [", encoding="utf-8")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_stack(bad)


def test_a_long_pool_serves_the_workloads_whose_long_prompts_it_takes_not_lora_guests() -> None:
    data = minimal(long_prompt_tokens=8000, long_pool="long", lora_adapters=["summarize"])
    data["pools"].append(  # type: ignore[attr-defined]
        {"name": "long", "model": "Llama-3.1-8B", "served_model_name": "chat-long"}
    )
    data["workloads"] = [{"name": "chat", "model": "Llama-3.1-8B"},
                         {"name": "utility", "model": "summarize"}]  # fmt: skip
    stack = parse_stack(data)
    chat, long = stack.pool("chat"), stack.pool("long")
    assert [p.name for p in stack.pools_of_model("Llama-3.1-8B")] == ["chat", "long"]
    assert [p.name for p in stack.pools_of_model("summarize")] == ["chat"]
    assert [w.name for w in stack.workloads_served_by(chat)] == ["chat", "utility"]
    assert [w.name for w in stack.workloads_served_by(long)] == ["chat"]
    assert stack.workloads_on(long) == []  # by model name alone: none


def test_a_fallback_pool_takes_the_workloads_of_the_pools_naming_it_one_hop() -> None:
    data = minimal(long_prompt_tokens=8000, long_pool="long", lora_adapters=["summarize"])
    data["pools"] += [  # type: ignore[operator]
        {"name": "long", "model": "Llama-3.1-8B", "served_model_name": "chat-long",
         "fallback": "spare"},
        {"name": "other", "model": "Qwen2.5-7B", "fallback": "spare"},
        {"name": "spare", "model": "Qwen2.5-7B", "served_model_name": "spare", "role": "fallback",
         "fallback": "last"},
        {"name": "last", "model": "Qwen2.5-7B", "served_model_name": "last", "role": "fallback"},
    ]  # fmt: skip
    data["workloads"] = [{"name": "chat", "model": "Llama-3.1-8B"},
                         {"name": "utility", "model": "summarize"},
                         {"name": "qa", "model": "Qwen2.5-7B"}]  # fmt: skip
    stack = parse_stack(data)
    # chat's long prompts fail over from its long pool; utility stays on chat, which names no
    # fallback; a fallback's own fallback takes nothing (the gateway goes one hop).
    assert [w.name for w in stack.workloads_failing_over_to(stack.pool("spare"))] == ["chat", "qa"]
    assert stack.workloads_failing_over_to(stack.pool("last")) == []
    assert stack.workloads_failing_over_to(stack.pool("chat")) == []
