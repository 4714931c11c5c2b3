"""Server-sent events framing: a body split into its events as its bytes arrive.

An event ends at a blank line; lines end in LF, CRLF or CR, as the SSE format allows (CRs are
read as LFs). One that is not complete yet is kept for the next bytes. `payload` is an event's
data: its `data:` lines, beside any comment, `event:`, `id:` or `retry:` lines. The bench's
stream timing reads events through it (`inhouse.bench.request_func`); the gateway's relay cuts
its bytes at the last blank line without splitting them (`gateway/relay.py`: it forwards
bytes, it does not read events).
"""

from __future__ import annotations

OTHER_FIELDS = (b"event", b"id", b"retry")  # fields of an event that are not its data


class EventSplitter:
    """The events of one SSE body, in order: `split` each read, `rest` at the end."""

    __slots__ = ("rest", "skips_lf")

    def __init__(self) -> None:
        self.rest = b""  # the start of an event whose end has not arrived
        self.skips_lf = False  # the last read ended in CR

    def split(self, data: bytes) -> list[bytes]:
        """The events `data` completes, each stripped of surrounding whitespace."""
        if self.skips_lf:
            self.skips_lf = False
            if data.startswith(b"\n"):
                data = data[1:]  # the LF of a CRLF split between two reads
        buf = self.rest + data if self.rest else data
        if b"\r" in buf:
            # NOTE: a read that ends in CR ends its line now (an event then comes out with the
            # read that completed it); an LF starting the next read belongs to that CR.
            self.skips_lf = buf.endswith(b"\r")
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
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
    """The data of a stripped event: its `data:` lines joined by newlines (a bare line with no
    field name counts as data too); None when it has none (a `:` ping, an `event:` alone)."""
    if event.startswith(b"data:") and b"\n" not in event:  # the usual event: one data line
        return event[5:].lstrip()
    data = []
    for line in event.split(b"\n"):
        if not line or line.startswith(b":"):
            continue  # a comment
        name, _, value = line.partition(b":")
        if name == b"data":
            data.append(value.lstrip())
        elif name not in OTHER_FIELDS:
            data.append(line)
    return b"\n".join(data) if data else None
