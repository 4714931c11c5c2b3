from __future__ import annotations

from inhouse.routing.pickers.max_score import pick_max_score


def test_the_best_total_wins_whatever_the_offset() -> None:
    assert [pick_max_score([0.1, 0.9, 0.5], offset) for offset in range(4)] == [1, 1, 1, 1]


def test_ties_go_to_the_first_at_or_after_the_offset() -> None:
    totals = [1.0, 0.2, 1.0, 1.0 - 1e-13]  # the last one ties within 1e-12
    assert [pick_max_score(totals, offset) for offset in range(5)] == [0, 2, 2, 3, 0]
