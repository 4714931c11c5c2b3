"""Streaming pass-through: engine bytes to the client as they come, read but not rewritten.

The relay cuts the engine's byte stream only at SSE event boundaries (`\\n\\n`), so a chunk
the client gets is whole events, byte-identical to the engine's. It looks at the bytes for
three things, each a C-speed `bytes` scan in the common case:

* the first token (for TTFT and the routing policy's `on_first_token`): the first events that
  are not only the chat role chunk;
* the usage chunk (`"choices":[],"usage":{...}`), which the gateway always asks the engine for
  (to settle token limits) and drops again when the client did not ask for it. vLLM then puts
  `system_fingerprint` on that chunk instead of on each finish chunk (one with a
  `finish_reason`), so for such a client the relay holds each finish chunk back until the
  usage chunk comes and writes its fingerprint into it: the stream vLLM would have sent
  without `include_usage`, byte for byte. A finish chunk is the last of its choice, so with
  `n = 1` nothing is reordered;
* how many events went out (`num_events`): what the client was sent, billed when the engine's
  usage never came (the client left, the stream broke); each event carries at least one token;
* nothing else: content is never parsed.

SSE lines may also end in CRLF or a bare CR. An engine whose stream has a CR (none of vLLM's
or SGLang's do: the check is one C-speed scan) has its line ends written as LF, the same
events, so that the relay can cut and read them; a CR that ends a piece waits for the next
one, whose LF may be its other half.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from inhouse.gateway.prompt import _loads

_ROLE_ONLY = b'"delta":{"role":"assistant","content":""}'
USAGE_MARK = b'"usage":{'
EVENT_MARK = b"data: {"  # a chunk or an error event; not `data: [DONE]`
_EMPTY_CHOICES = b'"choices":[]'
FINISH_MARK = b'"finish_reason":"'  # a finish chunk (a JSON string's quotes are escaped)
_CHOICE_MARK = b'"choices":[{'  # a chunk of a choice; not [DONE], an error, the usage chunk
_FINGERPRINT_MARK = b'"system_fingerprint":'


@dataclass(slots=True)
class StreamState:
    """What the relay learned from a stream so far."""

    wants_usage: bool
    carry: bytes = b""
    has_first_token: bool = False
    num_events: int = 0  # chunk events relayed (the chat role chunk included)
    usage: dict[str, Any] | None = None
    # Finish chunks waiting for the usage chunk's fingerprint (the client did not ask usage).
    held: list[bytes] = field(default_factory=list)


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
    if USAGE_MARK in out or (not state.wants_usage and (state.held or FINISH_MARK in out)):
        out = _read_events(state, out)
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
    """What is left at the stream's end: finish chunks still held (no usage chunk came),
    then a partial tail."""
    rest, state.carry = state.carry, b""
    return release_held(state) + (rest.replace(b"\r", b"\n") if rest.endswith(b"\r") else rest)


def release_held(state: StreamState) -> bytes:
    """The finish chunks still held, as they came (no usage chunk brought a fingerprint)."""
    state.num_events += len(state.held)
    return _release(state, b"")


def _release(state: StreamState, fingerprint: bytes) -> bytes:
    """The held finish chunks, with `fingerprint` (a JSON string) written in where given."""
    if not state.held:
        return b""
    out = b"".join(_stamped(event, fingerprint) + b"\n\n" for event in state.held)
    state.held.clear()
    return out


def hold_finish(state: StreamState, piece: bytes) -> bool:
    """A piece that is one whole finish chunk, for a client that did not ask usage: held (what
    `relay_piece` would do, without its cutting and splitting: the common last token)."""
    if (
        state.wants_usage
        or piece.find(b"\n\n") != len(piece) - 2
        or not piece.startswith(b"data: ")
        or _CHOICE_MARK not in piece
        or FINISH_MARK not in piece
    ):
        return False
    state.held.append(piece[:-2])
    return True


def _stamped(event: bytes, fingerprint: bytes) -> bytes:
    """The chunk with `"system_fingerprint"` last, where vLLM puts it on a finish chunk."""
    if not fingerprint or _FINGERPRINT_MARK in event or not event.endswith(b"}"):
        return event
    return event[:-1] + b"," + _FINGERPRINT_MARK + fingerprint + b"}"


def _read_events(state: StreamState, out: bytes) -> bytes:
    """Whole events: take the usage; for a client that did not ask usage, drop the usage
    chunk and hold the finish chunks until its fingerprint is known."""
    kept = []
    strips = not state.wants_usage
    for event in out.split(b"\n\n")[:-1]:
        if USAGE_MARK in event and event.startswith(b"data: "):
            try:
                body = _loads(event[6:])
            except ValueError:
                body = None
            usage = body.get("usage") if isinstance(body, dict) else None
            if isinstance(usage, dict):
                state.usage = usage
            if strips and usage is not None and _EMPTY_CHOICES in event:
                # The usage chunk the gateway asked for on its own behalf: dropped.
                fingerprint = body.get("system_fingerprint") if isinstance(body, dict) else None
                stamp = json.dumps(fingerprint).encode() if isinstance(fingerprint, str) else b""
                kept.append(_release(state, stamp)[:-2])
                continue
        if strips:
            if FINISH_MARK in event and _CHOICE_MARK in event:
                state.held.append(event)
                continue
            if state.held and _CHOICE_MARK not in event:  # [DONE], an error: no usage came
                kept.append(_release(state, b"")[:-2])
        kept.append(event)
    return b"".join(e + b"\n\n" for e in kept if e)


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
