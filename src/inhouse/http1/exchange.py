"""One request and its response on a connection of the gateway's HTTP server
(`server.py`): the ASGI scope, `receive` and `send`, and what the client gets when the
handler fails.

The connection feeds it (`add_body`, `end_body`, `disconnect`) and is told when its response is
complete (`GatewayProtocol.response_done`). The response head is built here and held by the
connection's `ChunkWriter` until the first body bytes, so head and body go out in one write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from inhouse.http1.errors import error_json

if TYPE_CHECKING:
    from inhouse.http1.server import GatewayProtocol

log = logging.getLogger("inhouse.http1")

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
HIGH_WATER_BYTES = 1 << 16  # request body buffered ahead of the handler before reading pauses


def status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase.encode())


STATUS_LINES = {status.value: status_line(status.value) for status in HTTPStatus}


class Exchange:
    """One request and its response on a connection: the ASGI scope, `receive` and `send`."""

    __slots__ = (
        "_body",
        "_chunked",
        "_conn",
        "_is_body_read",
        "_is_head_method",
        "_remaining",
        "_waiter",
        "expects_continue",
        "is_disconnected",
        "is_started",
        "keep_alive",
        "more_body",
        "num_buffered",
        "response_complete",
        "response_started",
        "scope",
    )

    def __init__(
        self, conn: GatewayProtocol, scope: dict[str, Any], keep_alive: bool, expects: bool
    ) -> None:
        self._conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.expects_continue = expects
        self._is_head_method = scope["method"] == "HEAD"
        self._body: list[bytes] = []
        self.num_buffered = 0
        self.more_body = True
        self._is_body_read = False
        self._waiter: asyncio.Future[None] | None = None
        self.is_started = False
        self.is_disconnected = False
        self.response_started = False
        self.response_complete = False
        self._chunked = False
        self._remaining: int | None = 0  # body bytes the content-length still owes; None: all

    @property
    def is_ready(self) -> bool:
        """Its handler may start: the body is complete, past the mark, or to be asked for."""
        return not self.more_body or self.expects_continue or self.num_buffered > HIGH_WATER_BYTES

    # -- fed by the connection ------------------------------------------------------------

    def add_body(self, data: bytes) -> None:
        if self.response_complete:
            return  # answered before its body was read: the rest is read and dropped
        self._body.append(data)
        self.num_buffered += len(data)
        self._wake()

    def drop_body(self) -> None:
        self._body = []
        self.num_buffered = 0

    def end_body(self) -> None:
        self.more_body = False
        self._wake()

    def disconnect(self) -> None:
        self.is_disconnected = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = waiter = self._conn.loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    # -- ASGI ---------------------------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        if self.expects_continue:
            self.expects_continue = False
            self._conn.write_continue()
        if not self._is_body_read:
            while not self._body and self.more_body and not self.is_disconnected:
                await self._wait()
            if not self.is_disconnected:
                parts = self._body
                body = parts[0] if len(parts) == 1 else b"".join(parts)
                self._body = []
                self.num_buffered = 0
                self._is_body_read = not self.more_body
                self._conn.update_reading()
                return {"type": "http.request", "body": body, "more_body": self.more_body}
        while not self.is_disconnected and not self.response_complete:
            await self._wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        conn = self._conn
        if conn.write_paused and not self.is_disconnected:
            await conn.drain()
        if self.is_disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self._start(message["status"], message.get("headers", ()))
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"expected 'http.response.body', got {kind!r}")
            self._write_body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"{kind!r} sent after the response was complete")

    def _start(self, status: int, headers: Any) -> None:
        self.expects_continue = False  # answered before its body: no 100 owed
        conn = self._conn
        parts = [STATUS_LINES.get(status) or status_line(status), conn.server.date_line()]
        chunked: bool | None = None
        remaining: int | None = 0
        num_headers = 0
        for name, value in headers:
            name = name.lower()
            if name == b"content-length":
                remaining, chunked = int(value), False
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                if b"close" in value.lower():
                    self.keep_alive = False
                continue  # the server's own, below
            parts += (name, b": ", value, b"\r\n")
            num_headers += 1
        if (
            chunked is None
            and not self._is_head_method
            and status >= 200
            and status not in (204, 304)
        ):
            if self.scope["http_version"] == "1.1":
                chunked = True
                parts.append(b"transfer-encoding: chunked\r\n")
            else:  # HTTP/1.0: the body ends with the connection
                remaining = None
                self.keep_alive = False
        if not self.keep_alive:
            parts.append(b"connection: close\r\n")
        elif self.scope["http_version"] == "1.0":
            parts.append(b"connection: keep-alive\r\n")
        parts.append(b"\r\n")
        head = b"".join(parts)
        # NOTE: a CR or LF inside a name or value would start a header (or a response) of its
        # own; every line above ends in the one CRLF it was given, so the counts tell.
        num_lines = len(parts) - 3 * num_headers
        if head.count(b"\n") != num_lines or head.count(b"\r") != num_lines:
            raise RuntimeError("a response header name or value holds a CR or LF")
        self._chunked = bool(chunked)
        self._remaining = remaining
        self.response_started = True
        conn.writer.hold_head(head)

    def _write_body(self, body: bytes, more_body: bool) -> None:
        if self._is_head_method:
            data = b""
        elif self._chunked:
            data = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            if not more_body:
                data += b"0\r\n\r\n"
        else:
            data = body
            if self._remaining is not None:
                if len(body) > self._remaining:
                    raise RuntimeError("response body longer than its content-length")
                self._remaining -= len(body)
        self._conn.writer.write(data)
        if not more_body:
            if self._remaining and not self._is_head_method:
                raise RuntimeError("response body shorter than its content-length")
            self.response_complete = True
            self._wake()
            self._conn.response_done(self)

    def unstart(self) -> bool:
        """The response's head was taken back unwritten: it has not started after all."""
        if self.response_complete:
            return False
        self.response_started = False
        return True

    async def run(self, app: App) -> None:
        """The handler's task: the app, and an answer for the client if the app fails."""
        try:
            await app(self.scope, self.receive, self.send)
        except Exception:
            log.exception("the handler of %s %s failed", self.scope["method"], self.scope["path"])
            conn = self._conn
            if self.is_disconnected or self.response_complete:
                return  # NOTE: the writer may hold the next request's head by now
            if not self.response_started or conn.writer.unstart():
                self.keep_alive = False
                body = error_json("The gateway failed on this request.", "InternalServerError",
                                  None, 500)  # fmt: skip
                length = str(len(body)).encode()
                headers = [(b"content-type", b"application/json"), (b"content-length", length)]
                self._start(500, headers)
                self._write_body(body, False)
            else:
                conn.close()  # cut mid-response: the client sees it end early
        else:
            if not self.response_complete and not self.is_disconnected:
                log.error("the handler of %s returned before its response", self.scope["path"])
                self._conn.close()
