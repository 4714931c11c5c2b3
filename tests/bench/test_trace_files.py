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
