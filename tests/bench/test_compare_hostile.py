"""Results `inhouse bench compare` reads back: a value that is not a finite number, or a file
from another version, is a SpecError naming the file; never a traceback or a passed gate."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from inhouse.bench.compare import compare, load_result, require_common_metrics
from inhouse.errors import SpecError

GOOD = {"completed": 10, "p99_ttft_ms": 200.0, "request_throughput": 5.0}


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("value", ["200ms", {"v": 1}, True, float("nan"), float("inf")])
def test_a_metric_that_is_not_a_finite_number_names_file_and_key(
    tmp_path: Path, value: object
) -> None:
    path = write(tmp_path / "r.json", {**GOOD, "p99_ttft_ms": value, "inhouse_version": "0.0.1"})
    with pytest.raises(SpecError, match=r"r\.json: `p99_ttft_ms` is .* another inhouse version"):
        load_result(path)


def test_truncated_json_and_a_fifo_are_refused(tmp_path: Path) -> None:
    truncated = tmp_path / "t.json"
    truncated.write_text(json.dumps(GOOD)[:20])
    with pytest.raises(SpecError, match=r"t\.json is not JSON"):
        load_result(truncated)
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        load_result(fifo)


def test_results_with_no_metric_in_common_are_refused(tmp_path: Path) -> None:
    base = load_result(write(tmp_path / "b.json", {**GOOD, "inhouse_version": "0.2"}))
    old = load_result(write(tmp_path / "o.json", {"completed": 10, "ttft": {"p99": 1}}))
    rows = compare(base, old)
    assert {row.status for row in rows} == {"missing"}
    with pytest.raises(SpecError, match=r"no metric in common \(inhouse versions 0.2 and unknown"):
        require_common_metrics(rows, base, old, ("b.json", "o.json"))
    require_common_metrics(compare(base, base), base, base, ("b.json", "b.json"))


@pytest.mark.parametrize("given", ["directory", "result.json"])
def test_a_run_that_did_not_finish_is_refused(tmp_path: Path, given: str) -> None:
    """A rerun into the same --out killed mid-run leaves its journal beside the earlier run's
    result.json: the gate compared that earlier run as if it were the new one."""
    run = tmp_path / "new"
    run.mkdir()
    write(run / "result.json", GOOD)
    (run / "requests.jsonl.partial").write_text('{"success": true}\n')
    with pytest.raises(SpecError) as err:
        load_result(run if given == "directory" else run / "result.json")
    assert str(err.value).startswith(f"{run / 'requests.jsonl.partial'}: the run in {run} did")
