"""Trace replay: the Mooncake and Azure LLM inference trace formats.

* Mooncake (`.jsonl`): one JSON object a line with `timestamp` (ms), `input_length`,
  `output_length` and `hash_ids`, one id per `block_tokens` (512) prompt tokens; equal ids mean
  equal prefix blocks.
* Azure (`.csv`): `TIMESTAMP` (a date-time or seconds), `ContextTokens`, `GeneratedTokens`; no
  content, so every prompt is unique.

Parsing takes text, not paths (the pure core reads no files). Replay keeps the trace's arrival
times divided by the rate scale, dropping arrivals at or after the duration.

A Mooncake block id becomes a span of its tokens, so engine blocks (16 tokens) under one id hash
alike wherever that id follows the same prefix. The ideal cache holds, per request, its leading
ids already seen in earlier requests.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from inhouse.errors import SpecError
from inhouse.hashing import ROOT_HASH, SpanHasher
from inhouse.workload.base import ScheduledRun, WorkRequest, ideal_cached_tokens

MOONCAKE_BLOCK_TOKENS = 512
# Memo entries (one per distinct block id after a given prefix) kept while replaying.
MAX_MEMO_BLOCKS = 1 << 16
# The longest prompt or answer a trace row may ask for (16 Mi tokens): a bigger count is a
# broken row, and replaying it would build that many pseudo-tokens.
MAX_TRACE_TOKENS = 1 << 24


@dataclass(frozen=True, slots=True)
class TraceRow:
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def parse_mooncake(lines: Iterable[str], source: str = "trace") -> tuple[TraceRow, ...]:
    return _checked(_mooncake_rows(lines, source), source)[0]


def _mooncake_rows(lines: Iterable[str], source: str) -> list[TraceRow]:
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(_mooncake_row(json.loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            raise SpecError(
                f"{source}:{number}: a Mooncake line needs timestamp (ms), input_length, "
                f"output_length and hash_ids: {exc}"
            ) from None
    return rows


def _mooncake_row(item: object) -> TraceRow:
    if not isinstance(item, dict):
        raise TypeError(f"expected a JSON object, got {type(item).__name__}")
    timestamp = item["timestamp"]
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        raise TypeError(f"timestamp {timestamp!r} is not a number of milliseconds")
    if not math.isfinite(timestamp):
        raise ValueError(f"timestamp {timestamp!r} is not a finite number")
    input_tokens = _token_count(item, "input_length")
    hash_ids = item.get("hash_ids", [])
    if not isinstance(hash_ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
    ):
        raise TypeError(f"hash_ids must be a list of integer block ids, not {hash_ids!r:.80}")
    max_ids = -(-input_tokens // MOONCAKE_BLOCK_TOKENS)
    if len(hash_ids) > max_ids:
        raise ValueError(
            f"{len(hash_ids)} hash_ids, but input_length {input_tokens} fills at most "
            f"{max_ids} blocks of {MOONCAKE_BLOCK_TOKENS} tokens"
        )
    return TraceRow(
        timestamp / 1000.0, input_tokens, _token_count(item, "output_length"), tuple(hash_ids)
    )


def _token_count(item: dict[str, object], key: str) -> int:
    """A whole, non-negative, bounded token count (an integral float such as 600.0 counts)."""
    value = item[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} {value!r} is not a whole number of tokens")
    return _bounded(key, value)


def _bounded(key: str, value: int) -> int:
    if not 0 <= value <= MAX_TRACE_TOKENS:
        raise ValueError(f"{key} {value} is outside 0..{MAX_TRACE_TOKENS} tokens")
    return value


def parse_azure(text: str, source: str = "trace") -> tuple[TraceRow, ...]:
    return _checked(_azure_rows(text, source), source)[0]


def read_trace(
    text: str, source: str, *, azure: bool, model: str | None = None, name: str = "trace"
) -> TraceWorkload:
    """A trace's text (Azure CSV, else Mooncake JSON lines) as a workload that says how many of
    its rows it leaves out for an empty prompt or output (`num_empty`)."""
    raw = _azure_rows(text, source) if azure else _mooncake_rows(text.splitlines(), source)
    rows, num_empty = _checked(raw, source)
    return TraceWorkload(rows, model=model, name=name, num_empty=num_empty)


def _azure_rows(text: str, source: str) -> list[TraceRow]:
    reader = csv.DictReader(io.StringIO(text))
    needed = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    missing = [c for c in needed if c not in (reader.fieldnames or ())]
    if missing:
        raise SpecError(f"{source}: an Azure trace needs the columns {', '.join(needed)}")
    rows = []
    start: datetime | None = None
    for number, item in enumerate(reader, 2):
        stamp = item["TIMESTAMP"].strip()
        try:
            try:
                arrival_s = float(stamp)
            except ValueError:
                moment = datetime.fromisoformat(stamp)
                start = start or moment
                arrival_s = (moment - start).total_seconds()
            if not math.isfinite(arrival_s):
                raise ValueError(f"TIMESTAMP {stamp!r} is not a finite number")
            rows.append(
                TraceRow(
                    arrival_s,
                    _bounded("ContextTokens", int(item["ContextTokens"])),
                    _bounded("GeneratedTokens", int(item["GeneratedTokens"])),
                )
            )
        except ValueError as exc:
            raise SpecError(f"{source}:{number}: bad Azure trace row: {exc}") from None
    return rows


def _checked(rows: list[TraceRow], source: str) -> tuple[tuple[TraceRow, ...], int]:
    """The rows in arrival order from 0, without those with an empty prompt or output (nothing
    to replay), and how many those were."""
    if not rows:
        raise SpecError(f"{source}: the trace has no requests")
    start = min(row.arrival_s for row in rows)
    kept = [
        TraceRow(row.arrival_s - start, row.input_tokens, row.output_tokens, row.hash_ids)
        for row in sorted(rows, key=lambda r: r.arrival_s)
        if row.input_tokens > 0 and row.output_tokens > 0
    ]
    if not kept:
        raise SpecError(f"{source}: every request has an empty prompt or output")
    return tuple(kept), len(rows) - len(kept)


@dataclass(frozen=True, slots=True)
class TraceWorkload:
    """Replay of parsed trace rows (`parse_mooncake`, `parse_azure`)."""

    rows: tuple[TraceRow, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS
    model: str | None = None
    name: str = "trace"
    num_empty: int = 0  # rows of the file left out: an empty prompt or output

    @property
    def span_s(self) -> float:
        return self.rows[-1].arrival_s if self.rows else 0.0

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> TraceRun:
        return TraceRun(self, block_size, duration_s, rate_scale)


class TraceRun(ScheduledRun):
    def __init__(
        self, spec: TraceWorkload, block_size: int, duration_s: float, scale: float
    ) -> None:
        super().__init__(spec.name, duration_s)
        assert scale > 0, "rate scale must be positive"
        assert spec.block_tokens % block_size == 0, (
            f"trace blocks of {spec.block_tokens} tokens must be a multiple of the engine's "
            f"block size {block_size}"
        )
        self.spec = spec
        self.block_size = block_size
        self._scale = scale
        self._next = 0
        self._seen: set[int] = set()
        self._memo: dict[tuple[int, int], list[int]] = {}
        # Azure rows: fresh spans above any id. NOTE: not negative ids: hash(-1) == hash(-2).
        self._unique_span = itertools.count(1 << 48)
        self._schedule_next()

    def _schedule_next(self) -> None:
        if self._next < len(self.spec.rows):
            row = self.spec.rows[self._next]
            self.schedule(row.arrival_s / self._scale, self._arrive)

    def _arrive(self, request_id: str, at_s: float) -> WorkRequest:
        row = self.spec.rows[self._next]
        self._next += 1
        self._schedule_next()
        if row.hash_ids:
            hashes, known_tokens = self._hash_ids(row)
        else:
            hasher = SpanHasher(self.block_size)
            hasher.extend(next(self._unique_span), row.input_tokens)
            hashes, known_tokens = hasher.hashes, 0
        ideal = ideal_cached_tokens(
            row.input_tokens, known_tokens // self.block_size, self.block_size
        )
        return WorkRequest(
            request_id,
            at_s,
            row.input_tokens,
            row.output_tokens,
            hashes,
            len(hashes),
            ideal,
            None,
            self.spec.model,
        )

    def _hash_ids(self, row: TraceRow) -> tuple[list[int], int]:
        """Engine block hashes of a Mooncake row, and the tokens of its leading seen ids."""
        per_id = self.spec.block_tokens
        hashes: list[int] = []
        parent = ROOT_HASH
        known_tokens = 0
        leading = True
        for i, block_id in enumerate(row.hash_ids):
            tokens = min(per_id, row.input_tokens - i * per_id)
            if tokens <= 0:
                break
            if leading and block_id in self._seen:
                known_tokens += tokens
            else:
                leading = False
            self._seen.add(block_id)
            key = (parent, block_id)
            blocks = self._memo.get(key) if tokens == per_id else None
            if blocks is None:
                blocks = SpanHasher(self.block_size, parent=parent).extend(block_id, tokens)
                if tokens == per_id:
                    if len(self._memo) >= MAX_MEMO_BLOCKS:
                        self._memo.clear()
                    self._memo[key] = blocks
            hashes.extend(blocks)
            if tokens < per_id:
                break
            parent = blocks[-1]
        return hashes, known_tokens
