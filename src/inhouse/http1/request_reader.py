"""Reading requests on a gateway connection: httptools' request parser fed what arrives
(`data_received`) and its callbacks, the base of `server.GatewayProtocol` as
`reader.ResponseReader` is the clients'. The callbacks are methods of the connection, not of a
reader it holds, so a body chunk costs one parser callback and no extra call.

What is read is held to limits here: a head (and a chunked body's trailers, apart) up to
`MAX_HEAD_BYTES`, the bytes read without the parser completing anything counted towards it
too; exactly one `Host` on HTTP/1.1; no `Transfer-Encoding` on HTTP/1.0; a body answered before
it was read dropped up to `MAX_DROPPED_BYTES`. How a request that breaks one is refused is the
connection's (`GatewayProtocol._refuse`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import unquote

import httptools

from inhouse.http1.chunk_writer import EXTENSION
from inhouse.http1.exchange import HIGH_WATER_BYTES, Exchange

if TYPE_CHECKING:
    import asyncio
    import collections
    from typing import Any

    from inhouse.http1.chunk_writer import ChunkWriter

log = logging.getLogger("inhouse.http1")

MAX_HEAD_BYTES = 1 << 16  # request line and headers together (and trailers, apart)
MAX_DROPPED_BYTES = 1 << 20  # of a body answered before it was read, then the connection closes
_ASGI = {"version": "3.0", "spec_version": "2.4"}


class _HeadTooLarge(Exception):
    pass


class _BadRequest(Exception):
    """A request refused with a 400 from a parser callback (no traceback logged)."""


class _DroppedEnough(Exception):
    pass


class RequestReader:
    """`data_received` and httptools' request callbacks, on the connection's state
    (`GatewayProtocol.__init__` sets it; declared here for the type checker)."""

    if TYPE_CHECKING:
        loop: asyncio.AbstractEventLoop
        parser: httptools.HttpRequestParser
        transport: asyncio.Transport | None
        writer: ChunkWriter
        _is_refused: bool
        _url: bytes
        _headers: list[tuple[bytes, bytes]]
        _num_head_bytes: int
        _num_trailer_bytes: int
        _num_stale: int
        _num_dropped: int
        _is_progress: bool
        _num_hosts: int
        _has_transfer_encoding: bool
        _head_since: float | None
        _expects_continue: bool
        _is_in_head: bool
        _is_in_message: bool
        _parsing: Exchange | None
        _active: Exchange | None
        _pipeline: collections.deque[Exchange]
        _quiet_since: float
        _addresses: tuple[Any, Any, str]

        def close(self) -> None: ...
        def update_reading(self) -> None: ...
        def _start(self, exchange: Exchange) -> None: ...
        def _refuse(self, status: int, message: str | None = None) -> None: ...

    # -- asyncio.Protocol: what arrives ---------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._is_refused:
            return
        self._quiet_since = self.loop.time()
        self._is_progress = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Not offered: the request is answered as HTTP/1.1, then the connection closes.
            last = self._parsing or (self._pipeline[-1] if self._pipeline else self._active)
            if last is None:
                self.close()  # answered already: nothing more will be read
            else:
                last.keep_alive = False
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, _DroppedEnough):
                self.close()
            elif isinstance(cause, _HeadTooLarge):
                self._refuse(431)
            elif isinstance(cause, _BadRequest):
                self._refuse(400, str(cause))
            else:
                if cause is not None:
                    log.warning("reading a request failed", exc_info=cause)
                self._refuse(400)
            return
        if self._is_progress:
            self._num_stale = 0
        elif self._is_in_message:
            # NOTE: httptools hands over a header (or a trailer, or a chunk's size line) only
            # once it is complete, copying the part read so far on every read: a line that
            # never ends is refused once the bytes that completed nothing pass the limit.
            self._num_stale += len(data)
            if self._num_stale > MAX_HEAD_BYTES:
                self._refuse(431)

    # -- httptools callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._is_progress = True
        self._is_in_message = True
        self._is_in_head = True
        if self._head_since is None:
            self._head_since = self.loop.time()
        self._url = b""
        self._headers = []
        self._num_head_bytes = 0
        self._num_trailer_bytes = 0
        self._num_hosts = 0
        self._has_transfer_encoding = False
        self._expects_continue = False

    def on_url(self, url: bytes) -> None:
        self._is_progress = True
        self._url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._is_progress = True
        if not self._is_in_head:  # a trailer of a chunked body: not a request header
            self._num_trailer_bytes += len(name) + len(value) + 4
            if self._num_trailer_bytes > MAX_HEAD_BYTES:
                raise _HeadTooLarge()
            return
        self._count_head(len(name) + len(value) + 4)
        name = name.lower()
        if name == b"expect":
            self._expects_continue = value.lower() == b"100-continue"
        elif name == b"host":
            self._num_hosts += 1
        elif name == b"transfer-encoding":
            self._has_transfer_encoding = True
        self._headers.append((name, value))

    def on_chunk_header(self) -> None:
        self._is_progress = True

    def on_chunk_complete(self) -> None:
        self._is_progress = True

    def _count_head(self, num_bytes: int) -> None:
        self._num_head_bytes += num_bytes
        if self._num_head_bytes > MAX_HEAD_BYTES:
            raise _HeadTooLarge()

    def on_headers_complete(self) -> None:
        self._is_progress = True
        self._is_in_head = False
        self._head_since = None
        if self.transport is None or self.transport.is_closing():
            return
        parser = self.parser
        version = parser.get_http_version()
        if self._num_hosts != 1 and (self._num_hosts > 1 or version == "1.1"):
            # RFC 9112 section 3.2: a 400 for an HTTP/1.1 request without exactly one Host
            raise _BadRequest("An HTTP/1.1 request needs exactly one Host header.")
        if self._has_transfer_encoding and version == "1.0":
            # RFC 9112 section 6.1: its framing is faulty; the connection closes after
            raise _BadRequest("Transfer-Encoding is not allowed in an HTTP/1.0 request.")
        try:
            url = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            raise _BadRequest("Invalid request target.") from None
        raw_path = url.path or b"/"  # an absolute-form target may have none
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        server, client, scheme = self._addresses
        scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "server": server,
            "client": client,
            "scheme": scheme,
            "method": parser.get_method().decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": self._headers,
            "extensions": {EXTENSION: self.writer},
        }
        expects = self._expects_continue
        # NOTE: a RequestReader is only ever a GatewayProtocol's base.
        exchange = Exchange(self, scope, parser.should_keep_alive(), expects)  # type: ignore[arg-type]
        self._parsing = exchange
        if self._active is None:
            self._active = exchange
            if expects:
                self._start(exchange)
        else:
            self._pipeline.append(exchange)
            self.update_reading()

    def on_body(self, body: bytes) -> None:
        self._is_progress = True
        exchange = self._parsing
        if exchange is None:
            return
        if exchange.response_complete:  # answered before its body was read: dropped
            self._num_dropped += len(body)
            if self._num_dropped > MAX_DROPPED_BYTES:
                raise _DroppedEnough()
            return
        exchange.add_body(body)
        if exchange.num_buffered > HIGH_WATER_BYTES:
            if exchange is self._active and not exchange.is_started:
                self._start(exchange)  # too big to wait for: the handler reads it as it comes
            self.update_reading()

    def on_message_complete(self) -> None:
        self._is_progress = True
        self._is_in_message = False
        self._num_dropped = 0
        exchange, self._parsing = self._parsing, None
        if exchange is None:
            return
        exchange.end_body()
        if exchange is self._active and not exchange.is_started:
            self._start(exchange)
