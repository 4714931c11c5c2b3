"""The gateway's HTTP server's listening side (`GatewayServer`): its sockets, the limits its
connections (`server.GatewayProtocol`) apply, the shared `date` line, and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import ssl
import time

from inhouse.http1.exchange import App
from inhouse.http1.server import GatewayProtocol


class GatewayServer:
    """The listening sockets and the connections of one gateway process."""

    def __init__(
        self,
        app: App,
        keep_alive_s: float = 75.0,
        ssl_context: ssl.SSLContext | None = None,
        header_timeout_s: float = 10.0,
        max_connections: int = 4096,
        send_timeout_s: float = 30.0,
    ) -> None:
        self.app = app
        self.keep_alive_s = keep_alive_s
        self.header_timeout_s = header_timeout_s
        self.max_connections = max_connections
        self.send_timeout_s = send_timeout_s
        self.ssl_context = ssl_context
        self.connections: set[GatewayProtocol] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]  # set by start
        self._servers: list[asyncio.Server] = []
        self._date = (0, b"")

    async def start(self, host: str, port: int, backlog: int = 4096) -> None:
        self.loop = asyncio.get_running_loop()
        server = await self.loop.create_server(
            lambda: GatewayProtocol(self),
            host,
            port,
            ssl=self.ssl_context,
            backlog=backlog,
            reuse_address=True,
        )
        self._servers.append(server)

    @property
    def timer_period_s(self) -> float:
        """How often a quiet connection's timer looks at its deadlines, at most."""
        return min(self.keep_alive_s, self.header_timeout_s)

    @property
    def port(self) -> int:
        """The port of the first listening socket (the one chosen for port 0)."""
        port: int = self._servers[0].sockets[0].getsockname()[1]
        return port

    def date_line(self) -> bytes:
        """The `date` header line, made once a second."""
        now = int(time.time())
        if now != self._date[0]:
            text = email.utils.formatdate(now, usegmt=True)
            self._date = (now, b"date: %s\r\n" % text.encode())
        return self._date[1]

    async def shutdown(self, grace_s: float = 5.0) -> None:
        """Stop listening; close idle connections at once and busy ones after their response;
        after `grace_s`, cancel the handlers still running and cut their connections."""
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.shutdown()
        # Until the handlers are done and the closed connections have sent what they hold
        # (a response still in a slow client's buffer is not cut).
        deadline = time.monotonic() + grace_s
        while (self.tasks or self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self.tasks), timeout=1.0)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        self._servers.clear()


def tls_context(certfile: str | None, keyfile: str | None) -> ssl.SSLContext | None:
    if not certfile:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context
