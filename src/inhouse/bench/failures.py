"""Why requests failed, worded for the console: the top reasons with their counts, and what to
do about the ones a user can fix (a missing API key, limits, a server that is not up)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

API_KEY_ENV = "INHOUSE_API_KEY"
TOP = 5

# (what the reason starts with, the hint)
HINTS = (
    (
        "HTTP 401",
        f"the server wants an API key: pass --api-key KEY or set {API_KEY_ENV} "
        "(`inhouse up` prints the demo tenant's key)",
    ),
    ("HTTP 403", "the key's tenant may not use this model: check the tenant's `models`"),
    ("HTTP 404", "unknown model or route: check --model (or the plan's model names)"),
    ("HTTP 429", "the gateway's rate or token limits refused it: lower the load or the limits"),
    ("HTTP 503", "no replica could take it (down, draining or the queue full)"),
    ("ConnectError", "nothing answers at --target: is the stack up?"),
    ("connection lost", "the server closed the connection mid-request"),
    ("timed out", "no answer within --request-timeout"),
)


NUMBER = re.compile(r"\d+(?:\.\d+)?")
MAX_REASON_CHARS = 200
MAX_REASONS = 10


def count_reasons(errors: Iterable[str]) -> dict[str, int]:
    """The most frequent failure reasons with their counts, reasons that differ only in their
    numbers counted as one (a 429's 'Retry after 0.3 s.'), each shown as its first instance."""
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    for error in errors:
        text = error[:MAX_REASON_CHARS]
        key = NUMBER.sub("#", text)
        counts[key] += 1
        first.setdefault(key, text)
    return {first[key]: count for key, count in counts.most_common(MAX_REASONS)}


def hint_for(reason: str) -> str | None:
    for prefix, hint in HINTS:
        if reason.startswith(prefix) or prefix in reason[:40]:
            return hint
    return None


def failure_lines(errors: Mapping[str, int], num_failed: int) -> list[str]:
    """The top reasons, most frequent first, each with its count and any hint."""
    if not num_failed:
        return []
    lines = [f"Failed requests: {num_failed}; top reasons:"]
    for reason, count in sorted(errors.items(), key=lambda kv: -kv[1])[:TOP]:
        lines.append(f"  {count:>6} x {reason[:160]}")
        hint = hint_for(reason)
        if hint:
            lines.append(f"           -> {hint}")
    return lines
