"""The deterministic tokenizer and the output plan."""

from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.server.generation import output_text, parse_eos_lengths, plan_generation
from inhouse.tokenizer import SimpleTokenizer, render_chat, seed_of


def test_simple_tokenizer_is_prefix_stable_and_deterministic() -> None:
    a, b = SimpleTokenizer(), SimpleTokenizer()
    text = "The system prompt of a copilot, then the user's question."
    ids = a.encode(text)
    assert len(ids) == -(-len(text) // 4)
    assert b.encode(text) == ids  # the same in every process
    assert a.encode(text + " And more.")[: len(text) // 4] == ids[: len(text) // 4]
    assert a.decode(ids) == text


def test_chat_history_keeps_its_tokens_turn_to_turn() -> None:
    tok = SimpleTokenizer()
    turn1 = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    turn2 = [*turn1, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "?"}]
    first = render_chat(turn1, add_generation_prompt=False)
    assert render_chat(turn2).startswith(first)
    assert tok.encode(render_chat(turn2))[: len(first) // 4] == tok.encode(first)[: len(first) // 4]


def test_unknown_ids_decode_to_stable_pieces() -> None:
    assert SimpleTokenizer().decode([123456, 7]) == SimpleTokenizer().decode([123456, 7])


def test_plan_is_max_tokens_by_default() -> None:
    plan = plan_generation(SimpleTokenizer(), 5, 40, 0, False, [], None)
    assert (plan.output_len, plan.finish_reason, plan.stop_reason) == (40, "length", None)


def test_stop_string_after_min_tokens() -> None:
    tok = SimpleTokenizer()
    text, _ = output_text(tok, plan_generation(tok, 0, 30, 0, False, [], None), 0, 30, 0)
    stop = text[9:13]  # completes with token 4 (characters 12..15)
    plan = plan_generation(tok, 0, 30, 0, False, [stop], None)
    assert (plan.output_len, plan.stop_reason, plan.cut_chars) == (4, stop, 9)
    late = plan_generation(tok, 0, 30, 6, False, [stop], None)
    assert late.output_len > 6 or late.finish_reason == "length"
    shown, _ = output_text(tok, plan, 0, plan.output_len, 0)
    assert shown == text[:9]


def test_eos_lengths_are_seeded_by_the_prompt() -> None:
    tok = SimpleTokenizer()
    eos = parse_eos_lengths("exp:10")
    one = plan_generation(tok, seed_of([1, 2, 3]), 1000, 0, False, [], eos)
    again = plan_generation(tok, seed_of([1, 2, 3]), 1000, 0, False, [], eos)
    assert one == again and one.finish_reason == "stop"
    floor = plan_generation(tok, seed_of([1, 2, 3]), 1000, 999, False, [], eos)
    assert floor.output_len >= 999
    assert plan_generation(tok, 1, 1000, 0, True, [], eos).output_len == 1000


@pytest.mark.parametrize("text", ["exp", "exp:-1", "uniform:5", "uniform:9:2", "zipf:1"])
def test_bad_eos_length_specs_name_the_forms(text: str) -> None:
    with pytest.raises(SpecError, match="--eos-length-dist"):
        parse_eos_lengths(text)
