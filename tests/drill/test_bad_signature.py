"""The drills' "clients unaffected" checks (bad-signature, load-not-ready, kv-fill): no request
failed, before its first token or mid-stream, or was refused meanwhile."""

from __future__ import annotations

import pytest

from inhouse.bench.metrics import Outcome, RequestResult
from inhouse.drill.drills import kv_fill, load_not_ready
from inhouse.drill.drills.bad_signature import check_clients
from inhouse.drill.evidence import DrillResult


def _request(i: int, status: int, chunks: int, cut: bool = False) -> RequestResult:
    outcome = Outcome(i, 0.0, t_send=float(i), success=status == 200 and chunks > 0 and not cut,
                      status=status, num_chunks=chunks)  # fmt: skip
    if cut:
        outcome.error = "error event: the engine went away"
    return RequestResult(outcome, f"r{i}", 100)


# Each drill's check of its clients, by its own name.
CHECKS = {
    "bad-signature": check_clients,
    "load-not-ready": load_not_ready.check_clients,
    "kv-fill": kv_fill.check_completed,
}


@pytest.mark.parametrize("drill", list(CHECKS))
def test_a_stream_cut_or_a_refusal_fails_each_drills_client_check(drill: str) -> None:
    # bad-signature and load-not-ready counted only failures before the first token: a stream
    # cut mid-way passed, and load-not-ready passed a load the gateway refused outright (4xx);
    # kv-fill, whose check says "not refused or cut", did not count refusals.
    check = CHECKS[drill]
    for results in (
        [_request(0, 200, 5), _request(1, 200, 3, cut=True)],
        [_request(0, 200, 5), _request(1, 429, 0)],
        [_request(i, 429, 0) for i in range(3)],
        [],
    ):
        result = DrillResult(drill, "now", "test")
        check(result, results)
        (verdict,) = result.checks
        assert not verdict.ok, (drill, verdict.observed)
    result = DrillResult(drill, "now", "test")
    check(result, [_request(i, 200, 5) for i in range(3)])
    assert result.checks[0].ok, result.checks[0].observed


@pytest.mark.parametrize(
    ("statuses", "ok"),
    [
        ([200, 200, 200], True),
        ([200, 502, 200], False),  # failed before its first token
        # The gateway refusing the drill's load (a tier's queue full, a limit): nothing
        # "failed before streaming", and the check passed.
        ([429, 429, 429], False),
        ([], False),  # no load at all
    ],
)
def test_clients_unaffected_counts_refusals_and_needs_requests(
    statuses: list[int], ok: bool
) -> None:
    results = [_request(i, s, 5 if s == 200 else 0) for i, s in enumerate(statuses)]
    result = DrillResult("bad-signature", "now", "test")
    check_clients(result, results)
    (check,) = result.checks
    assert check.ok is ok, check.observed
