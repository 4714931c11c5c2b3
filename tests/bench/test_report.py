"""A bench run's reports: result.json, requests.jsonl and report.md keep their shape whatever the
API key is (the key is redacted from the values, never from the names of the keys)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support.mock_server import MockServerThread, MockTiming

from inhouse.bench.redact import REDACTED
from inhouse.cli.main import main

SMALL = ["-p", "document=60", "-p", "output=4", "-p", "instruction_tokens=32"]


@pytest.mark.parametrize(
    "key",
    [
        "load",  # inside the name of result.json's `workload`: KeyError 'workload'
        "s",  # inside the JSON literal `false`: the redacted text no longer parsed
        "success",  # the name of every requests.jsonl row's `success`
    ],
)
def test_a_key_inside_a_key_name_leaves_every_report_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    """A wrong key fails every request (401); a key that is part of a name in the files (a
    short test key) renamed it: `render_markdown` then raised KeyError: 'workload'."""
    for name in ("INHOUSE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    label = f"label-{key}-1"
    with MockServerThread(MockTiming(ttft_s=0.01, fail_status=401)) as mock:
        argv = ["bench", "--target", mock.url, "--workload", "utility", "--rate", "50",
                "--num-requests", "4", "--label", label, "--out", str(out), "--api-key", key,
                "--no-charts", *SMALL]  # fmt: skip
        assert main(argv) == 1  # nothing completed
    result = json.loads((out / "result.json").read_text())
    assert result["workload"]["name"] == "utility"
    assert (result["completed"], result["failed"]) == (0, 4)
    assert result["label"] == f"label-{REDACTED}-1"  # a value holding the key is redacted
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert [row["success"] for row in rows] == [False] * 4
    assert (out / "report.md").read_text().startswith("# inhouse bench — utility (live)")


def test_failures_that_differ_only_in_their_numbers_are_one_reason() -> None:
    """The gateway's 429 says when to retry ('Retry after 0.3 s.'): every refusal was its own
    reason, so the console's top five showed a handful of 1s and 2s out of hundreds of 429s."""
    from inhouse.bench.config import BenchSpec
    from inhouse.bench.driver import BenchRun
    from inhouse.bench.metrics import Outcome, RequestResult
    from inhouse.bench.report import build_result

    def refused(i: int, wait_s: float) -> RequestResult:
        body = (
            '{"error":{"message":"Tenant t1 is over its limit of 5 req/s. Retry after '
            f'{wait_s:.1f} s.","type":"rate_limit_exceeded","param":null,"code":429}}}}'
        )
        return RequestResult(Outcome(i, 0.0, status=429, error=f"HTTP 429: {body}"), f"r{i}", 9)

    results = [refused(0, 0.3), refused(1, 0.7), refused(2, 1.2)]
    results.append(RequestResult(Outcome(3, 0.0, error="timed out after 600 s"), "r3", 9))
    spec = BenchSpec(workload="utility", target="http://x", rate=1.0)
    errors = build_result(BenchRun(spec, results, 1.0))["errors"]
    # The first of each, word for word, with its count.
    assert errors == {results[0].outcome.error: 3, "timed out after 600 s": 1}


def test_result_json_records_the_run_s_length_and_its_counters_window() -> None:
    """`inhouse report` leaves the planner's warm-up (a share of the run's length) out of its
    p95s and must tell runs that shared the engines' counters in time: result.json recorded
    neither the length asked for nor when the counters were read."""
    from inhouse.bench.config import BenchSpec
    from inhouse.bench.driver import BenchRun
    from inhouse.bench.metrics import Outcome, RequestResult
    from inhouse.bench.report import build_result

    spec = BenchSpec(workload="utility", target="http://x", rate=1.0, duration_s=45.0)
    done = [RequestResult(Outcome(0, 0.0, success=True, ttft_s=0.1, latency_s=0.2), "r0", 9)]
    run = BenchRun(spec, done, 45.5, window_unix_s=(1_800_000_000.25, 1_800_000_046.5))
    result = build_result(run)
    assert result["workload"]["duration_s"] == 45.0
    assert result["run"]["counters_window_unix_s"] == [1_800_000_000.25, 1_800_000_046.5]
    unknown = build_result(BenchRun(BenchSpec(workload="utility", target="x", rate=1.0), done, 1))
    assert unknown["run"]["counters_window_unix_s"] is None


def test_report_md_says_its_percentiles_count_the_warm_up() -> None:
    """report.md's latency table counts every request, its first seconds included, as vLLM's
    does; `bench --plan`'s verdict and `inhouse report` leave the warm-up out. The table did
    not say which, beside a verdict that quoted other p95s for the same run."""
    from inhouse.bench.config import BenchSpec
    from inhouse.bench.driver import BenchRun
    from inhouse.bench.metrics import Outcome, RequestResult
    from inhouse.bench.report import build_result, render_markdown

    spec = BenchSpec(workload="utility", target="http://x", rate=1.0, duration_s=45.0)
    done = [RequestResult(Outcome(0, 0.0, success=True, ttft_s=0.1, latency_s=0.2), "r0", 9)]
    text = render_markdown(build_result(BenchRun(spec, done, 45.5)), [])
    assert "every request of the run, its warm-up included" in text


def test_report_md_says_the_server_hit_rate_counts_every_client() -> None:
    """The engines' counters count every request they serve: a cold probe beside the run, or
    any other client, is in the server-side rate, which report.md gave as the run's own."""
    from inhouse.bench.config import BenchSpec
    from inhouse.bench.driver import BenchRun
    from inhouse.bench.metrics import Outcome, RequestResult
    from inhouse.bench.report import build_result, render_markdown

    spec = BenchSpec(workload="utility", target="http://x", rate=1.0, duration_s=45.0)
    done = [RequestResult(Outcome(0, 0.0, success=True, ttft_s=0.1, latency_s=0.2), "r0", 9)]
    text = render_markdown(build_result(BenchRun(spec, done, 45.5)), [])
    assert (
        "| server (/metrics delta: every client of the engines meanwhile, not only this run) |"
        in text
    )
