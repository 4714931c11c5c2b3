"""Trace files that cannot be read as text: a SpecError naming the file, never a traceback or a
read that waits forever."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from inhouse.bench.config import load_trace
from inhouse.cli.simulate import load_trace as load_simulated_trace
from inhouse.errors import SpecError

LOADERS = [load_trace, load_simulated_trace]
GOOD = json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})


@pytest.mark.parametrize("load", LOADERS)
def test_a_byte_that_is_not_utf8_names_the_file_and_line(load, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(f"{GOOD}\n{GOOD}\n".encode() + b'{"timestamp": "\xff"}\n')
    with pytest.raises(SpecError, match=rf"^{path}: line 3 \(byte \d+\) is not UTF-8"):
        load(path)


@pytest.mark.parametrize("load", LOADERS)
def test_a_fifo_is_refused_without_waiting_for_a_writer(load, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    os.mkfifo(path)
    with pytest.raises(SpecError, match="not a regular file"):
        load(path)


@pytest.mark.parametrize("load", LOADERS)
def test_a_directory_and_a_missing_file_are_refused(load, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="a directory; give the path of a file"):
        load(tmp_path)
    with pytest.raises(SpecError, match="No such file"):
        load(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("load", LOADERS)
def test_rows_with_nothing_to_replay_are_counted_and_said(
    load, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row with an empty prompt or output is left out of the replay, and the user is told
    how many were: the replayed load is not the file's."""
    empty = json.dumps({"timestamp": 5, "input_length": 600, "output_length": 0, "hash_ids": [1]})
    path = tmp_path / "t.jsonl"
    path.write_text(f"{GOOD}\n{empty}\n{GOOD}\n", encoding="utf-8")
    trace = load(path)
    assert (len(trace.rows), trace.num_empty) == (2, 1)
    assert (
        f"trace {path}: 1 of 3 rows left out (an empty prompt or output" in capsys.readouterr().err
    )
    csv = tmp_path / "t.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,10,5\n1,0,5\n", encoding="utf-8")
    assert load(csv).num_empty == 1
    assert "1 of 2 rows left out" in capsys.readouterr().err
    path.write_text(f"{GOOD}\n", encoding="utf-8")
    assert load(path).num_empty == 0
    assert capsys.readouterr().err == ""
