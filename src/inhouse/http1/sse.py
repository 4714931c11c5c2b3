"""Server-sent events framing: a body split into its events as its bytes arrive.

An event ends at a blank line (`\\n\\n`); one that is not complete yet is kept for the next
bytes. `payload` is an event's `data:` field. The bench's stream timing reads events through
it (`inhouse.bench.request_func`); the gateway's relay cuts its bytes at the last blank line
without splitting them (`gateway/relay.py`: it forwards bytes, it does not read events).
"""

from __future__ import annotations


class EventSplitter:
    """The events of one SSE body, in order: `split` each read, `rest` at the end."""

    __slots__ = ("rest",)

    def __init__(self) -> None:
        self.rest = b""  # the start of an event whose end has not arrived

    def split(self, data: bytes) -> list[bytes]:
        """The events `data` completes, each stripped of surrounding whitespace."""
        buf = self.rest + data if self.rest else data
        events = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            events.append(buf[start:end].strip())
            start = end + 2
        self.rest = buf[start:]
        return events


def payload(event: bytes) -> bytes | None:
    """The data of a stripped event (`data: X` or a bare `X`); None for a comment (`:` ping)
    or an empty event."""
    if not event or event.startswith(b":"):
        return None
    if event.startswith(b"data:"):
        return event[5:].lstrip()
    return event
