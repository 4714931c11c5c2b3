from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhouse.errors import SpecError
from inhouse.hashing import hash_spans
from inhouse.workload import TraceWorkload, parse_azure, parse_mooncake

from .conftest import drive

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "mooncake_conversation_sample.jsonl"
BS = 16


def mooncake(*rows: tuple[float, int, int, list[int]]) -> TraceWorkload:
    lines = [
        json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
        for t, i, o, h in rows
    ]
    return TraceWorkload(parse_mooncake(lines))


def test_block_ids_become_engine_block_hashes_shared_exactly_as_far_as_the_ids() -> None:
    trace = mooncake((0, 1536, 10, [0, 1, 2]), (1000, 1300, 10, [0, 1, 5]))
    first, second = drive(trace.start(block_size=BS, seed=0, duration_s=10))
    assert first.block_hashes == hash_spans([(0, 512), (1, 512), (2, 512)], BS)
    assert second.block_hashes == hash_spans([(0, 512), (1, 512), (5, 276)], BS)
    assert first.block_hashes[:64] == second.block_hashes[:64]
    assert first.block_hashes[64] != second.block_hashes[64]
    assert (first.num_ideal_cached_tokens, second.num_ideal_cached_tokens) == (0, 1024)
    assert second.arrival_s == 1.0


def test_rate_scale_compresses_time_and_duration_cuts_the_tail() -> None:
    trace = mooncake(*((t * 1000, 600, 5, [t]) for t in range(10)))
    arrivals = [
        r.arrival_s for r in drive(trace.start(block_size=BS, seed=0, duration_s=3, rate_scale=2))
    ]
    assert arrivals == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]


def independent_ideal_rate(lines: list[str]) -> float:
    """The sample's infinite-cache hit rate, computed without the workload code."""
    seen: set[int] = set()
    hit = total = 0
    for line in lines:
        row = json.loads(line)
        known = 0
        for i, block in enumerate(row["hash_ids"]):
            if block not in seen:
                break
            known += min(512, row["input_length"] - 512 * i)
        hit += min(known // BS, (row["input_length"] - 1) // BS) * BS
        total += row["input_length"]
        seen.update(row["hash_ids"])
    return hit / total


def test_the_mooncake_samples_theoretical_hit_rate() -> None:
    lines = SAMPLE.read_text().splitlines()
    trace = TraceWorkload(parse_mooncake(lines))
    assert len(trace.rows) == 300
    assert (trace.rows[0].input_tokens, trace.rows[0].output_tokens) == (6758, 500)
    run = trace.start(block_size=BS, seed=0, duration_s=1e9)
    requests = drive(run)
    assert len(requests) == 300
    assert run.theoretical_hit_rate == pytest.approx(independent_ideal_rate(lines), abs=1e-12)
    assert 0.07 < run.theoretical_hit_rate < 0.09


def test_azure_rows_are_relative_and_unique() -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    trace = TraceWorkload(parse_azure(text))
    assert [row.arrival_s for row in trace.rows] == pytest.approx([0.0, 4.314579])
    first, second = drive(trace.start(block_size=BS, seed=0, duration_s=10))
    assert first.block_hashes[0] != second.block_hashes[0]
    assert (first.num_prompt_tokens, first.output_len) == (374, 44)
    numeric = parse_azure("TIMESTAMP,ContextTokens,GeneratedTokens\n10,5,5\n12.5,6,6\n")
    assert [row.arrival_s for row in numeric] == [0.0, 2.5]


def test_bad_traces_name_the_problem() -> None:
    with pytest.raises(SpecError, match=r"trace:1: a Mooncake line needs timestamp"):
        parse_mooncake(['{"timestamp": 0}'])
    with pytest.raises(SpecError, match="needs the columns TIMESTAMP, ContextTokens"):
        parse_azure("time,tokens\n1,2\n")
    with pytest.raises(SpecError, match="no requests"):
        parse_mooncake([])
