"""The spec files' YAML: what PyYAML's safe loader would accept silently or crash on."""

from __future__ import annotations

import time

import pytest

from inhouse.errors import SpecError
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import parse_stack_text
from inhouse.spec.yaml_load import load_yaml

STACK = """version: 1
name: tiny
pools:
  - name: chat
    model: meta-llama/Llama-3.1-8B-Instruct
"""


def test_a_tenant_budget_given_twice_is_refused_naming_both_lines() -> None:
    # yaml.safe_load kept the second value: a daily budget of 1,000 tokens became 1e11.
    text = STACK + (
        "gateway:\n  tenants:\n    - name: acme\n"
        "      limits: {daily_tokens: 1000, daily_tokens: 100000000000}\n"
    )
    with pytest.raises(SpecError, match=r"duplicate key 'daily_tokens' \(first on line 9\)"):
        parse_stack_text(text, "stack.yaml")


def test_a_block_key_given_twice_is_refused_with_its_line() -> None:
    text = STACK + "    replicas: 4\n    replicas: 1\n"
    with pytest.raises(
        SpecError, match=r"(?s)duplicate key 'replicas' \(first on line 6\).*line 7"
    ):
        parse_stack_text(text, "stack.yaml")


def test_merge_keys_still_override_as_yaml_says() -> None:
    data = load_yaml("base: &b {rpm: 10, tpm: 5}\nlimits:\n  <<: *b\n  rpm: 20\n", "f")
    assert data["limits"] == {"rpm": 20, "tpm": 5}


def test_an_anchor_reused_a_few_times_is_fine() -> None:
    text = STACK + "    knobs: &k {max_num_seqs: 8}\n  - name: b\n    model: m\n    knobs: *k\n"
    data = load_yaml(text, "f")
    assert data["pools"][1]["knobs"] == {"max_num_seqs": 8}


def test_a_billion_laughs_file_is_refused_fast() -> None:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    text = "\n".join(levels) + "\ngateway: {x: *i}\n"
    started = time.perf_counter()
    with pytest.raises(SpecError, match="expand it to 926,177,117 nodes from 31 written"):
        load_yaml(text, "bomb.yaml")
    assert time.perf_counter() - started < 5


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(SpecError, match="refers to a node that contains it"):
        load_yaml("a: &a [1, *a]\n", "f")


def test_deep_nesting_is_a_sentence_not_a_recursion_error() -> None:
    with pytest.raises(SpecError, match="f: nested too deeply"):
        load_yaml("x: " + "[" * 5000 + "]" * 5000 + "\n", "f")


def test_a_tab_gets_the_fix() -> None:
    with pytest.raises(SpecError, match=r"(?s)line 4.*indent with spaces"):
        parse_stack_text(STACK.replace("  - name", "\t- name"), "stack.yaml")


def test_gateway_section_parses_as_before() -> None:
    stack = parse_stack_text(STACK + "gateway:\n  tenants: [{name: acme}]\n", "stack.yaml")
    assert parse_gateway(stack.gateway).tenants[0].name == "acme"
