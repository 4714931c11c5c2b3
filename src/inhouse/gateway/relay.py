"""Streaming pass-through: engine bytes to the client as they come, read but not rewritten.

The relay cuts the engine's byte stream only at SSE event boundaries (`\\n\\n`), so a chunk
the client gets is whole events, byte-identical to the engine's. It looks at the bytes for
three things, each a C-speed `bytes` scan in the common case:

* the first token (for TTFT and the routing policy's `on_first_token`): the first events that
  are not only the chat role chunk;
* the usage chunk (`"choices":[],"usage":{...}`), which the gateway always asks the engine for
  (to settle token limits) and drops again when the client did not ask for it;
* how many events went out (`num_events`): what the client was sent, billed when the engine's
  usage never came (the client left, the stream broke); each event carries at least one token;
* nothing else: content is never parsed.

SSE lines may also end in CRLF or a bare CR. An engine whose stream has a CR (none of vLLM's
or SGLang's do: the check is one C-speed scan) has its line ends written as LF, the same
events, so that the relay can cut and read them; a CR that ends a piece waits for the next
one, whose LF may be its other half.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inhouse.gateway.prompt import _loads

_ROLE_ONLY = b'"delta":{"role":"assistant","content":""}'
USAGE_MARK = b'"usage":{'
EVENT_MARK = b"data: {"  # a chunk or an error event; not `data: [DONE]`
_EMPTY_CHOICES = b'"choices":[]'


@dataclass(slots=True)
class StreamState:
    """What the relay learned from a stream so far."""

    wants_usage: bool
    carry: bytes = b""
    has_first_token: bool = False
    num_events: int = 0  # chunk events relayed (the chat role chunk included)
    usage: dict[str, Any] | None = None


def relay_piece(state: StreamState, piece: bytes) -> bytes:
    """The whole events in `carry + piece` (to forward now, usage chunk dropped unless the
    client asked for it); the partial tail stays in `state.carry`."""
    data = state.carry + piece if state.carry else piece
    held_cr = b""
    if b"\r" in data:
        if data.endswith(b"\r"):
            data, held_cr = data[:-1], b"\r"
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    cut = data.rfind(b"\n\n")
    if cut < 0:
        state.carry = data + held_cr
        return b""
    out, state.carry = data[: cut + 2], data[cut + 2 :] + held_cr
    if USAGE_MARK in out:
        out = _take_usage(state, out)
    if out:
        state.num_events += out.count(EVENT_MARK)
        if not state.has_first_token and not (out.count(b"data: ") == 1 and _ROLE_ONLY in out):
            state.has_first_token = True
    return out


def is_role_only(data: bytes) -> bool:
    """Only the chat role chunk (no token yet): the gateway holds it back with the response
    head until the first token, so a failure during prefill can still be retried."""
    return data.count(b"data: ") == 1 and _ROLE_ONLY in data and data.endswith(b"\n\n")


def flush(state: StreamState) -> bytes:
    rest, state.carry = state.carry, b""
    return rest.replace(b"\r", b"\n") if rest.endswith(b"\r") else rest


def _take_usage(state: StreamState, out: bytes) -> bytes:
    kept = []
    for event in out.split(b"\n\n")[:-1]:
        if USAGE_MARK in event and event.startswith(b"data: "):
            try:
                body = _loads(event[6:])
            except ValueError:
                kept.append(event)
                continue
            usage = body.get("usage") if isinstance(body, dict) else None
            if isinstance(usage, dict):
                state.usage = usage
            if not state.wants_usage and _EMPTY_CHOICES in event:
                continue  # the usage chunk the gateway asked for on its own behalf
        kept.append(event)
    return b"".join(e + b"\n\n" for e in kept)


class NotJson(ValueError):
    """A body that should be JSON (a 200 answer) and is not."""


def usage_of_body(data: bytes) -> dict[str, Any] | None:
    """`usage` of a non-streamed response body; `NotJson` when it is not JSON at all."""
    try:
        body = _loads(data)
    except ValueError:
        raise NotJson from None
    usage = body.get("usage") if isinstance(body, dict) else None
    return usage if isinstance(usage, dict) else None
