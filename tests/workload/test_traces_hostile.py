"""Broken Mooncake and Azure rows: a SpecError naming the line, never a traceback, a silently
coerced value or a row too big to replay."""

from __future__ import annotations

import json

import pytest

from inhouse.errors import SpecError
from inhouse.workload import parse_azure, parse_mooncake

GOOD = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}


def line(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ('{"timestamp": 0, "input_length": 1e999, "output_length": 5}', "input_length inf"),
        ('{"timestamp": NaN, "input_length": 600, "output_length": 5}', "timestamp nan"),
        ('{"timestamp": Infinity, "input_length": 600, "output_length": 5}', "timestamp inf"),
        (line(timestamp="5"), "timestamp '5'"),
        (line(input_length=1.7), "input_length 1.7"),
        (line(input_length="12"), "input_length '12'"),
        (line(input_length=True), "input_length True"),
        (line(input_length=-3), "input_length -3"),
        (line(input_length=10**12), "input_length 1000000000000"),
        (line(output_length=10**12), "output_length 1000000000000"),
        (line(hash_ids="123"), "hash_ids must be a list"),
        (line(hash_ids={"1": 2}), "hash_ids must be a list"),
        (line(hash_ids=[1.5, 2.9]), "hash_ids must be a list"),
        (line(input_length=10, hash_ids=[1, 2, 3]), "3 hash_ids"),
        ("[1, 2]", "a JSON object"),
    ],
)
def test_a_bad_mooncake_row_names_its_line(bad: str, says: str) -> None:
    with pytest.raises(SpecError, match=r"^t\.jsonl:3: ") as info:
        parse_mooncake([line(), "", bad, line(timestamp=5)], "t.jsonl")
    assert says in str(info.value)


def test_whole_floats_and_the_sample_shape_still_parse() -> None:
    rows = parse_mooncake([line(input_length=600.0), line(timestamp=-1000, hash_ids=[])])
    assert [(r.arrival_s, r.input_tokens, r.hash_ids) for r in rows] == [
        (0.0, 600, ()),
        (1.0, 600, (1, 2)),
    ]


@pytest.mark.parametrize(
    ("row", "says"),
    [("nan,10,5", "not a finite"), ("0,1000000000000,5", "ContextTokens"), ("0,5,-1", "-1")],
)
def test_a_bad_azure_row_names_its_line(row: str, says: str) -> None:
    text = f"TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n{row}\n"
    with pytest.raises(SpecError, match=r"^t\.csv:3: ") as info:
        parse_azure(text, "t.csv")
    assert says in str(info.value)
