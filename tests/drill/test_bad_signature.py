"""bad-signature's "clients unaffected": no request failed or was refused meanwhile."""

from __future__ import annotations

import pytest

from inhouse.bench.metrics import Outcome, RequestResult
from inhouse.drill.drills.bad_signature import check_clients
from inhouse.drill.evidence import DrillResult


def _request(i: int, status: int, chunks: int) -> RequestResult:
    outcome = Outcome(i, 0.0, t_send=float(i), success=status == 200 and chunks > 0,
                      status=status, num_chunks=chunks)  # fmt: skip
    return RequestResult(outcome, f"r{i}", 100)


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
