"""The one HTTP/1.1 response reader: httptools' parser and the head it reads.

Both clients read responses through it: the gateway's engine connections (`upstream.py`,
which relay body bytes as they come) and the bench's timed connections (`client.py`, which
stamp each read with its arrival time). A subclass is the parser's callback object: it gets
the head here (`status`, `headers` with lower-case names, `keep_alive`, then `on_head`) and
takes the body itself (`on_body`, `on_message_complete`). The callbacks are methods of the
connection, not of a reader it holds, so a chunk costs one parser callback and no extra call.
"""

from __future__ import annotations

import httptools


class ResponseReader:
    """httptools' response callbacks for the head; `reset_reader` before each response, then
    `self._parser.feed_data` with what arrives (it raises `httptools.HttpParserError` on a
    malformed response)."""

    __slots__ = ("_parser", "headers", "keep_alive", "status")

    def reset_reader(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0  # 0 until the head is complete
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = True

    # -- httptools callbacks ------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        parser = self._parser
        self.status = parser.get_status_code()
        self.keep_alive = parser.should_keep_alive()
        self.on_head()

    def on_head(self) -> None:
        """The head is complete (`status`, `headers`, `keep_alive` are set)."""

    def on_body(self, body: bytes) -> None:
        """Body bytes, as the parser hands them over (chunked framing removed)."""

    def on_message_complete(self) -> None:
        """The response has ended."""
