"""Prompts keep the workload's prefix structure through tokenization."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from inhouse.bench.prompts import CHARS_PER_TOKEN, WORDS, PromptBuilder
from inhouse.tokenizer import SimpleTokenizer
from inhouse.workload import WorkRequest, make_workload


def requests(name: str, params: dict[str, str], n: int) -> Iterator[WorkRequest]:
    run = make_workload(name, params).start(block_size=16, seed=1, duration_s=math.inf)
    for _ in range(n):
        yield run.pop_arrival()


def test_every_word_is_one_token_of_four_characters() -> None:
    assert all(len(w) == CHARS_PER_TOKEN and w.startswith(" ") for w in WORDS)


def test_shared_prefix_text_is_byte_identical_and_the_rest_differs() -> None:
    builder = PromptBuilder(salt=7, block_size=16)
    params = {"num_groups": "1", "prefix_tokens": "64", "suffix": "40"}
    a, b = (builder.prompt_text(r) for r in requests("shared-prefix", params, 2))
    assert a[: 64 * 4] == b[: 64 * 4]
    assert a[64 * 4 : 70 * 4] != b[64 * 4 : 70 * 4]


def test_length_and_server_side_cache_structure_survive_tokenization() -> None:
    tokenizer = SimpleTokenizer()
    builder = PromptBuilder(salt=1, block_size=16)
    params = {"num_tasks": "1", "instruction_tokens": "48", "document": "100"}
    first, second = list(requests("utility", params, 2))
    ids_a = tokenizer.encode(builder.prompt_text(first))
    ids_b = tokenizer.encode(builder.prompt_text(second))
    assert len(ids_a) == first.num_prompt_tokens
    shared = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y)
    assert shared >= second.num_ideal_cached_tokens == 48


def test_a_new_salt_changes_every_word() -> None:
    (req,) = requests("utility", {}, 1)
    assert PromptBuilder(salt=1, block_size=16).prompt_text(req) != PromptBuilder(
        salt=2, block_size=16
    ).prompt_text(req)


def test_sessions_resend_history_with_the_real_answer() -> None:
    params = {"sessions": "1", "min_turns": "2", "max_turns": "2", "system_prompt_tokens": "32"}
    run = make_workload("agent", params).start(block_size=16, seed=0, duration_s=100.0)
    builder = PromptBuilder(salt=3, block_size=16, model="m")
    turn1 = run.pop_arrival()
    body1 = json.loads(builder.payload(turn1).body)
    assert body1["max_tokens"] == turn1.output_len and body1["ignore_eos"] is True
    assert body1["stream_options"] == {"include_usage": True}
    builder.record_answer(turn1, " out put", ok=True)
    run.on_complete(turn1, 1.0)
    turn2 = run.pop_arrival()
    payload = builder.payload(turn2)
    prompt2 = json.loads(payload.body)["prompt"]
    assert payload.keep_text
    assert prompt2.startswith(body1["prompt"] + " out put")
    new_tokens = turn2.num_prompt_tokens - turn1.num_prompt_tokens - turn1.output_len
    assert len(prompt2) == len(body1["prompt"]) + len(" out put") + 4 * new_tokens


def test_chat_sessions_grow_the_message_list() -> None:
    params = {"sessions": "1", "min_turns": "2", "max_turns": "2"}
    run = make_workload("agent", params).start(block_size=16, seed=0, duration_s=100.0)
    builder = PromptBuilder(salt=3, block_size=16, endpoint="chat")
    turn1 = run.pop_arrival()
    payload = builder.payload(turn1)
    assert payload.path == "/v1/chat/completions"
    builder.record_answer(turn1, "ok", ok=True)
    run.on_complete(turn1, 1.0)
    messages = json.loads(builder.payload(run.pop_arrival()).body)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == "ok"


def test_words_do_not_depend_on_the_process() -> None:
    (req,) = requests("utility", {}, 1)
    text = PromptBuilder(salt=5, block_size=16).prompt_text(req)
    assert len(text) == 4 * req.num_prompt_tokens
    assert text[:16] == PromptBuilder(salt=5, block_size=16).prompt_text(req)[:16]
