"""`inhouse bench`: a run against the mock server, --simulate, sweep, and compare exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tests.support.mock_server import MockServerThread, MockTiming

from inhouse.cli.main import main

STACK = """\
version: 1
name: one
engine: simulated
pools:
  - name: main
    model: meta-llama/Llama-3.1-8B-Instruct
    served_model_name: tiny
    replicas: 1
"""
SRC = Path(__file__).resolve().parents[2] / "src"
SMALL = ["-p", "document=60", "-p", "output=4", "-p", "instruction_tokens=32"]


def test_run_writes_every_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        code = main(
            [
                "bench",
                "--target",
                mock.url,
                "--workload",
                "utility",
                "--rate",
                "50",
                "--num-requests",
                "15",
                "--slo",
                "ttft_ms=500,itl_ms=50",
                "--out",
                str(out),
                *SMALL,
            ]
        )
    assert code == 0
    result = json.loads((out / "result.json").read_text())
    for key in (
        "mean_ttft_ms",
        "p99_tpot_ms",
        "median_itl_ms",
        "std_e2el_ms",
        "request_goodput",
        "max_output_tokens_per_s",
        "total_token_throughput",
        "mean_ttft_sched_ms",
    ):
        assert key in result
    assert result["completed"] == 15 and result["backend"] == "openai"
    assert result["request_rate"] == 50.0
    assert {p.name for p in out.iterdir()} >= {
        "result.json",
        "report.md",
        "report.html",
        "requests.jsonl",
        "distributions.png",
        "timeline.png",
    }
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html
    assert "Serving Benchmark Result" in capsys.readouterr().out


def test_simulate_uses_the_same_report(tmp_path: Path) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(STACK)
    out = tmp_path / "sim"
    code = main(
        [
            "bench",
            "--simulate",
            str(stack),
            "--workload",
            "utility",
            "--rate",
            "2",
            "--duration",
            "5",
            "--no-charts",
            "--out",
            str(out),
            *SMALL,
        ]
    )
    assert code == 0
    result = json.loads((out / "result.json").read_text())
    assert result["run"]["source"] == "simulate" and result["completed"] > 0
    assert result["simulated"]["stack"] == "one"
    assert result["client_bottleneck"] is False


@pytest.mark.parametrize(
    "load", [["--rate", "2", "--rate-scale", "1e9"], ["--rate", "2", "--duration", "1e12"]]
)
def test_simulate_refuses_a_run_past_what_a_simulation_may_send(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], load: list[str]
) -> None:
    # `inhouse simulate` refuses these before starting; `bench --simulate` simulated for ever.
    stack = tmp_path / "stack.yaml"
    stack.write_text(STACK)
    argv = ["bench", "--simulate", str(stack), "--workload", "utility", "--no-charts",
            "--out", str(tmp_path / "sim"), *load, *SMALL]  # fmt: skip
    if "--duration" not in load:
        argv += ["--duration", "60"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "more than the 1,000,000 a run may" in err, err


def test_sweep_finds_a_rate_on_the_simulator(tmp_path: Path) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(STACK)
    out = tmp_path / "sweep"
    code = main(
        [
            "bench",
            "sweep",
            "--simulate",
            str(stack),
            "--workload",
            "utility",
            "--rate",
            "1",
            "--multipliers",
            "1,2",
            "--search-steps",
            "1",
            "--duration",
            "5",
            "--slo",
            "ttft_ms=2000",
            "--no-charts",
            "--out",
            str(out),
            *SMALL,
        ]
    )
    assert code == 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert [p["rate"] for p in sweep["points"]] == [1.0, 2.0, 4.0]
    assert sweep["max_rate_meeting_slo"] == 4.0
    assert (out / "rate-1" / "result.json").is_file()


def write_result(path: Path, **values: float) -> Path:
    path.mkdir()
    base = {"completed": 10, "p50_ttft_ms": 100.0, "p99_ttft_ms": 200.0, "request_throughput": 5.0}
    base.update(values)
    (path / "result.json").write_text(json.dumps(base))
    return path


def test_compare_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_result(tmp_path / "base")
    same = write_result(tmp_path / "same", p99_ttft_ms=205.0)
    worse = write_result(tmp_path / "worse", p99_ttft_ms=260.0)
    slower = write_result(tmp_path / "slower", request_throughput=4.0)
    assert main(["bench", "compare", str(base), str(same)]) == 0
    assert main(["bench", "compare", str(base), str(worse)]) == 1
    assert "p99_ttft_ms" in capsys.readouterr().out
    assert main(["bench", "compare", str(base), str(slower)]) == 1
    assert main(["bench", "compare", str(base), str(worse), "--threshold", "50"]) == 0
    args = ["bench", "compare", str(base), str(worse), "--metric-threshold", "p99_ttft_ms=40"]
    assert main(args) == 0


def test_bad_input_names_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--workload", "utility", "--out", str(tmp_path)]) == 2
    assert "--target" in capsys.readouterr().err
    args = [
        "bench",
        "--target",
        "http://127.0.0.1:1",
        "--workload",
        "utility",
        "--rate",
        "1",
        "--concurrency",
        "2",
        "--out",
        str(tmp_path),
    ]
    assert main(args) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["bench", "compare", str(tmp_path / "nope"), str(tmp_path)]) == 2


@pytest.mark.parametrize("how", ["flag", "INHOUSE_API_KEY", "OPENAI_API_KEY"])
def test_the_api_key_is_sent_and_written_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The key reaches the server, but no artifact holds it (nor, from the environment, the
    command line): result.json, requests.jsonl, report.md, report.html."""
    from tests.support import mock_server

    key = "ihk-0badcafe-Sup3rSecretKeyMaterialNobodyMaySee"
    heads: list[str] = []
    take = mock_server.take_request

    def recorded(buffer: bytes) -> tuple[str, bytes, bytes] | None:
        found = take(buffer)
        if found is not None:
            heads.append(found[0])
        return found

    monkeypatch.setattr(mock_server, "take_request", recorded)
    for name in ("INHOUSE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    flags = ["--api-key", key] if how == "flag" else []
    if how != "flag":
        monkeypatch.setenv(how, key)
    out = tmp_path / "run"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        argv = ["bench", "--target", mock.url, "--workload", "utility", "--rate", "50",
                "--num-requests", "4", "--out", str(out), *flags, *SMALL]  # fmt: skip
        monkeypatch.setattr("sys.argv", ["inhouse", *argv])
        assert main(argv) == 0
    assert any(f"Bearer {key}" in head for head in heads if "/v1/" in head)
    written = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {"result.json", "requests.jsonl", "report.md", "report.html"} <= set(written)
    for name, data in written.items():
        assert key.encode() not in data, name
    command = json.loads(written["result.json"])["run"]["command"]
    assert ("--api-key REDACTED" in command) == (how == "flag")


def test_compare_refuses_garbage_and_results_with_nothing_in_common(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = write_result(tmp_path / "base")
    garbage = write_result(tmp_path / "garbage", p99_ttft_ms="slow")  # type: ignore[arg-type]
    assert main(["bench", "compare", str(base), str(garbage)]) == 2
    assert "`p99_ttft_ms` is 'slow'" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "result.json").write_text(json.dumps({"completed": 10, "ttft": {"p99": 1.0}}))
    assert main(["bench", "compare", str(base), str(other)]) == 2
    assert "no metric in common" in capsys.readouterr().err


def start_long_run(url: str, out: Path, workers: int) -> subprocess.Popen[str]:
    """`inhouse bench` for two minutes against `url`, in a process group of its own (to signal
    or kill it, workers and all, mid-run)."""
    args = ["bench", "--target", url, "--workload", "utility", "--rate", "20"]
    args += ["--duration", "120", "--out", str(out), "--no-charts", *SMALL]
    args += ["--workers", str(workers)]
    return subprocess.Popen(
        [sys.executable, "-m", "inhouse", *args],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("signal_name", "workers", "to_group"),
    [("SIGINT", 1, False), ("SIGTERM", 1, False), ("SIGHUP", 1, False), ("SIGHUP", 2, True)],
)
def test_a_signal_mid_run_writes_what_was_measured(
    tmp_path: Path, signal_name: str, workers: int, to_group: bool
) -> None:
    """Ctrl-C, `kill` (SIGTERM: a timeout, a pod deleted) or a closed terminal (SIGHUP, to the
    whole process group, worker processes too) mid-run: the reports of what was measured are
    written and the exit code says the run is incomplete. SIGTERM and SIGHUP killed the
    process and every measurement with it; SIGHUP killed the worker processes."""
    out = tmp_path / "run"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        proc = start_long_run(mock.url, out, workers)  # its own process group, as a terminal's
        try:
            deadline = time.monotonic() + 60
            while mock.server.stats.num_requests < 5 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            signum = getattr(signal, signal_name)
            if to_group:
                os.killpg(proc.pid, signum)
            else:
                proc.send_signal(signum)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 130, (stdout, stderr)
    assert "wrote what was measured" in stderr
    result = json.loads((out / "result.json").read_text())
    assert result["run"]["interrupted"] and result["completed"] >= 1
    assert result["failed"] == 0, result["errors"]


@pytest.mark.parametrize("timeout", ["0", "-5", "nan", "inf"])
def test_a_request_timeout_that_is_no_timeout_is_refused(
    tmp_path: Path, timeout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 or a negative number failed every request as 'timed out'; nan and inf left a request
    to a server that stalls after its head waiting forever, and the run with it."""
    args = ["bench", "--target", "http://127.0.0.1:1", "--workload", "utility", "--rate", "1"]
    code = main([*args, "--request-timeout", timeout, "--out", str(tmp_path)])
    assert code == 2
    assert "--request-timeout must be a positive number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize("percentiles", ["50,150", "-1", "nan"])
def test_a_percentile_out_of_range_is_refused_before_the_run(
    tmp_path: Path, percentiles: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """numpy refuses a percentile outside 0..100 — when the run was over, in a traceback that
    took every measurement with it."""
    args = ["bench", "--target", "http://127.0.0.1:1", "--workload", "utility", "--rate", "1"]
    code = main([*args, "--percentiles", percentiles, "--out", str(tmp_path)])
    assert code == 2
    assert "--percentiles: each must be between 0 and 100" in capsys.readouterr().err


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_kill_9_mid_run_keeps_the_records_measured(tmp_path: Path, workers: int) -> None:
    """`kill -9` (or the OOM killer) mid-run: results were written only at the end, so the
    whole run was lost. Each request's record is now on disk about a second after it ends."""
    out = tmp_path / "run"
    partial = out / "requests.jsonl.partial"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        proc = start_long_run(mock.url, out, workers)  # its workers die with it (an OOM kill)
        try:
            deadline = time.monotonic() + 60
            while mock.server.stats.num_requests < 20 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            time.sleep(1.5)  # a flush (each second) since the 20th request was answered
            answered = mock.server.stats.num_requests
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        sent = mock.server.stats.num_requests
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "result.json").exists()
    rows = _rows(partial)
    assert answered >= 20
    assert 20 <= len(rows) <= sent, (len(rows), answered, sent)
    assert all(row["success"] for row in rows)
    assert len({row["request_id"] for row in rows}) == len(rows)
    assert all(row["ttft_ms"] > 0 and row["t_sched_s"] >= 0 for row in rows)


def test_what_a_killed_run_measured_can_be_read_marked_unfinished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `.partial` could not be summarised at all: report and compare refused it and the
    operator had only raw rows. `bench report --partial DIR` now summarises them, headed as an
    unfinished run; without --partial it refuses, naming the flag; compare still refuses."""
    out = tmp_path / "run"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        proc = start_long_run(mock.url, out, 1)
        try:
            deadline = time.monotonic() + 60
            while mock.server.stats.num_requests < 10 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            time.sleep(1.5)  # a flush since the 10th request was answered
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    with (out / "requests.jsonl.partial").open("ab") as journal:
        journal.write(b'{"request_id": "cut-off mid-ro')  # the kill can cut the last row
    rows = _rows_whole(out / "requests.jsonl.partial")
    assert len(rows) >= 10
    capsys.readouterr()

    assert main(["bench", "report", str(out)]) == 2
    assert "add --partial" in capsys.readouterr().err

    assert main(["bench", "report", "--partial", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["unfinished"] is True
    assert summary["num_prompts"] == summary["completed"] == len(rows)
    assert summary["num_bad_lines"] == 1
    ttft = sorted(float(row["ttft_ms"]) for row in rows)  # type: ignore[arg-type]
    assert summary["median_ttft_ms"] == pytest.approx(float(np.median(ttft)))
    assert summary["duration"] == pytest.approx(
        max(float(r["t_send_s"]) + float(r["e2el_ms"]) / 1000 for r in rows)  # type: ignore[arg-type]
    )

    assert main(["bench", "report", "--partial", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"UNFINISHED RUN: {out} did not finish")
    assert "UNFINISHED run (partial)" in text and f"the {len(rows)} request(s)" in text
    assert not (out / "result.json").exists()  # nothing written that compare could take

    assert main(["bench", "compare", str(out), str(out)]) == 2
    assert "did not finish" in capsys.readouterr().err


def _rows_whole(path: Path) -> list[dict[str, object]]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def test_bench_report_of_a_finished_run_and_of_no_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        args = ["bench", "--target", mock.url, "--workload", "utility", "--rate", "50"]
        assert main([*args, "--num-requests", "6", "--out", str(out), "--no-charts", *SMALL]) == 0
    capsys.readouterr()
    assert main(["bench", "report", str(out)]) == 0
    assert "Successful requests:" in capsys.readouterr().out
    assert main(["bench", "report", "--partial", str(out)]) == 2
    assert "drop --partial" in capsys.readouterr().err
    assert main(["bench", "report", str(tmp_path / "none")]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_a_crash_while_writing_the_reports_keeps_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the summary or the charts raised after the run and took every measurement
    with it. The records stay in requests.jsonl.partial, and the run reads as unfinished."""
    from inhouse.bench import report

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the summary")

    monkeypatch.setattr(report, "build_result", broken)
    out = tmp_path / "run"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        args = ["bench", "--target", mock.url, "--workload", "utility", "--rate", "50"]
        args += ["--num-requests", "12", "--out", str(out), "--no-charts", *SMALL]
        with pytest.raises(RuntimeError, match="a bug in the summary"):
            main(args)
    rows = _rows(out / "requests.jsonl.partial")
    assert len(rows) == 12 and all(row["success"] for row in rows)
    assert not (out / "result.json").exists() and not (out / "requests.jsonl").exists()


def test_a_whole_run_leaves_no_journal_and_the_same_rows(tmp_path: Path) -> None:
    """At the end requests.jsonl holds every request and the journal is gone."""
    out = tmp_path / "run"
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        args = ["bench", "--target", mock.url, "--workload", "utility", "--rate", "50"]
        assert main([*args, "--num-requests", "12", "--out", str(out), "--no-charts", *SMALL]) == 0
    assert not (out / "requests.jsonl.partial").exists()
    assert (
        len(_rows(out / "requests.jsonl"))
        == json.loads((out / "result.json").read_text())["num_prompts"]
        == 12
    )


def test_an_out_directory_that_cannot_be_written_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file where --out's directory should be failed only once the run was over."""
    (tmp_path / "taken").write_text("")
    with MockServerThread(MockTiming(ttft_s=0.01, itl_s=0.005)) as mock:
        args = ["bench", "--target", mock.url, "--workload", "utility", "--rate", "50"]
        code = main([*args, "--num-requests", "5", "--out", str(tmp_path / "taken"), *SMALL])
        assert mock.server.stats.num_requests == 0
    assert code == 2
    assert f"--out {tmp_path / 'taken'}: cannot write" in capsys.readouterr().err
