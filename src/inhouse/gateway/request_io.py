"""What the generation routes read of a request and how they answer one they refuse: the
headers they use, the body (with its size limit), the client's request id and address, and an
error response in OpenAI's shape.

Everything a client sends that the gateway echoes or logs is bounded here: `x-request-id` is
cut to `MAX_REQUEST_ID_CHARS`, and names quoted back in error messages go through `quoted`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import Receive, Scope, Send

from inhouse.gateway.errors import GatewayError
from inhouse.http1.chunk_writer import EXTENSION, ChunkWriter

MAX_REQUEST_ID_CHARS = 128
MAX_QUOTED_CHARS = 256

_HEADERS = frozenset(
    (
        b"authorization",
        b"content-length",
        b"content-type",
        b"x-forwarded-for",
        b"x-request-id",
        b"x-session-id",
    )
)


def request_headers(scope: Scope) -> dict[bytes, str]:
    """The headers the generation routes read, each its first value, in one pass."""
    found: dict[bytes, str] = {}
    for key, value in scope["headers"]:
        if key in _HEADERS and key not in found:
            found[key] = value.decode("latin-1")
    return found


def client_request_id(headers: dict[bytes, str]) -> str | None:
    """The client's `x-request-id`, at most `MAX_REQUEST_ID_CHARS` of it (it is echoed in the
    response and logged: a client does not get to put 64 KiB into every log line)."""
    value = headers.get(b"x-request-id")
    if not value:
        return None
    return value if len(value) <= MAX_REQUEST_ID_CHARS else value[:MAX_REQUEST_ID_CHARS]


def quoted(text: str) -> str:
    """A client's string as an error message quotes it: at most `MAX_QUOTED_CHARS`."""
    if len(text) <= MAX_QUOTED_CHARS:
        return text
    return f"{text[:MAX_QUOTED_CHARS]}… ({len(text)} characters)"


class ClientAddresses:
    """The client's address for the logs: the peer's, or, when the peer is a trusted proxy
    (the edge Envoy), the last address its `X-Forwarded-For` adds."""

    def __init__(self, trusted: Iterable[str]) -> None:
        self._networks = [ipaddress.ip_network(n, strict=False) for n in trusted]
        self._known: dict[str, bool] = {}

    def is_trusted(self, host: str) -> bool:
        found = self._known.get(host)
        if found is None:
            try:
                address = ipaddress.ip_address(host)
                found = any(address in network for network in self._networks)
            except ValueError:
                found = False
            if len(self._known) < 4096:
                self._known[host] = found
        return found

    def client_of(self, scope: Scope, forwarded: str | None) -> str | None:
        peer = scope.get("client")
        host = peer[0] if peer else None
        if forwarded and host is not None and self.is_trusted(host):
            last = forwarded.rsplit(",", 1)[-1].strip()
            if last:
                return last[:64]
        return host


async def read_body(receive: Receive, length: str | None, limit: int) -> bytes:
    if length is not None and length.isdigit() and int(length) > limit:
        raise GatewayError(
            413,
            f"The request body is {int(length)} bytes; this gateway accepts at most {limit}.",
            param="body",
            reason="body_too_large",
        )
    parts = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError("client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise GatewayError(
                413,
                f"The request body exceeds {limit} bytes, the most this gateway accepts.",
                param="body",
                reason="body_too_large",
            )
        parts.append(chunk)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def chunk_writer(scope: Scope) -> ChunkWriter | None:
    """The server's direct chunk writer (`http_server.GatewayProtocol`), if it offers one."""
    extensions = scope.get("extensions")
    if not extensions or scope.get("http_version") != "1.1":
        return None
    writer: ChunkWriter | None = extensions.get(EXTENSION)
    return writer


async def send_error(send: Send, error: GatewayError, extra: list[tuple[bytes, bytes]]) -> None:
    body = error.body()
    headers = [*error.headers(), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
