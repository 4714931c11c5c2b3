"""The documented sequence end to end on the simulated stack (scripts/reference-run.sh): plan,
up, bench chat, utility and the cold probe, drill all, report. Every SLO row that can be measured
there is measured; with `inhouse drill` present the degraded row and section 8 come from real
drill evidence."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import cast

import pytest

from inhouse.launch.tether import popen

ROOT = Path(__file__).resolve().parents[2]
HAS_DRILL = importlib.util.find_spec("inhouse.cli.drill") is not None


def _descendants(pid: int) -> list[int]:
    """Every live process below `pid` (Linux /proc), children of new sessions included: the
    stack and drill processes start their own sessions, so a process-group kill misses them."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _run(
    argv: list[str], env: dict[str, str], timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run`, but a timeout kills the whole tree, so nothing the sequence started
    outlives the test (a leftover stack would hold ports and cores from the rest of the suite);
    and, tethered in a group of its own, nothing outlives a pytest killed outright either."""
    process = cast("subprocess.Popen[str]", popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    ))  # fmt: skip
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        for pid in [*_descendants(process.pid), process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"timed out after {timeout_s:.0f} s\n{stdout[-3000:]}{stderr[-3000:]}")
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@pytest.mark.slow
# A drill that did not pass is reported as a warning in the summary, not raised (see below).
@pytest.mark.filterwarnings("default:the reference run's drills")
def test_the_documented_sequence_fills_the_measured_column(tmp_path: Path) -> None:
    # NOTE: 15-minute simulated soak days: the sequence is under test here, not the soak's
    # two real days (tests/drill and `inhouse drill run soak --quick` run those); the
    # evidence and the report say the days were shortened.
    # 60 s runs (the script's default): section 4 counts what each run scheduled after its
    # warm-up (its first 20%), and the cold probe's 6 sessions need 60 s to leave the 20
    # cold requests a p95 needs after it (40 s left about 15).
    env = {**os.environ, "BENCH_S": "60", "COMPARE": "0", "PYTHONPATH": str(ROOT / "src")}
    env["DRILL_FLAGS"] = "--quick --soak-day-s 900"
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    out = tmp_path / "reference"
    done = _run(["bash", str(ROOT / "scripts/reference-run.sh"), str(out)], env, 1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = (out / "report" / "reference-architecture.md").read_text()
    table = doc.split("## 4. SLO commitments")[1].split("## 5.")[0]
    # A degraded commitment other than TTFT (the example's ITL) is never measured: the
    # kill-replica drill measures p95 TTFT only, and the row says so.
    never = "the kill-replica drill measures p95 TTFT only"
    # NOTE: the table's rows only: the count under it names the rows not measured yet too.
    unmeasured = [
        line
        for line in table.splitlines()
        if line.startswith("|") and "not measured" in line and never not in line
    ]
    drill_rows = [line for line in unmeasured if "replica lost" in line]
    assert len(unmeasured) == len(drill_rows), unmeasured  # every bench row has its number
    if HAS_DRILL:
        assert drill_rows == [], drill_rows
        # Any count: the sequence is under test here; a drill that fails is named after it.
        passed = re.search(
            r"Drills passed: \d of 7(; \*\*not passed: [a-z, -]+\*\*)?( \([^)]*\))?\.", doc
        )
        assert passed, doc[:2000]
        if "not passed" in passed.group(0):
            # Not this test's failure, but the CI log should say which drill did not pass.
            warnings.warn(f"the reference run's drills: {passed.group(0)}", stacklevel=1)
        assert "not run" not in doc.split("## 8. Runbook drills")[1].split("###")[0]
    for name in ("sizing-memo.md", "cost-sheet.xlsx", "license-memo.md", "runbook.md"):
        assert (out / "report" / name).exists()
    assert "Public version" in (out / "report-public" / "reference-architecture.md").read_text()
