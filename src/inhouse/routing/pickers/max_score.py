"""Picker `max_score`: the best total, ties rotating (llm-d's max-score picker).

Signal: the weighted sum of the scorers' scores. Ties (within 1e-12) go to the first tied
candidate at or after `offset mod n`; policies pass the number of decisions observed, so equal
replicas share traffic instead of the lowest index taking it all. Cost: two passes over the
totals.
"""

from __future__ import annotations


def pick_max_score(totals: list[float], offset: int) -> int:
    """Position of the best total; among ties, the first at or after `offset mod n`."""
    top = max(totals)
    n = len(totals)
    start = offset % n
    for k in range(n):
        i = (start + k) % n
        if totals[i] >= top - 1e-12:
            return i
    raise AssertionError("unreachable: some total equals the maximum")
