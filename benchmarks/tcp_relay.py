"""The floor for any router on this host: a byte relay with no HTTP in it.

    python benchmarks/tcp_relay.py --port 9000 --upstream 127.0.0.1:8001 127.0.0.1:8002

Each client connection gets its own connection to the next upstream in turn, and bytes go
both ways unread (uvloop when installed). What a request pays through it, over going direct,
is what one more process in the path costs on this machine: its wake-ups, its copies, and the
second core it keeps busy. `bench_gateway_overhead.py` runs it as the `tcp-relay` path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import socket


class _Pipe(asyncio.Protocol):
    """One direction's sink: writes what the other side reads; pauses it when full."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        with contextlib.suppress(OSError):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending += data
            return
        peer.transport.write(data)

    def attach(self, peer: _Pipe) -> None:
        self.peer = peer
        if self.pending and peer.transport is not None:
            peer.transport.write(self.pending)
            self.pending = b""

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()


async def serve(port: int, upstreams: list[tuple[str, int]]) -> None:
    loop = asyncio.get_running_loop()
    turn = itertools.cycle(upstreams)
    connecting: set[asyncio.Task[None]] = set()

    def accept() -> _Pipe:
        client = _Pipe()
        host, up_port = next(turn)

        async def connect() -> None:
            try:
                _, engine = await loop.create_connection(_Pipe, host, up_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            engine.attach(client)
            client.attach(engine)

        task = loop.create_task(connect())
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return client

    server = await loop.create_server(accept, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", nargs="+", required=True, help="HOST:PORT of each engine")
    args = parser.parse_args()
    upstreams = [(u.rsplit(":", 1)[0], int(u.rsplit(":", 1)[1])) for u in args.upstream]
    try:
        import uvloop

        uvloop.run(serve(args.port, upstreams))
    except ImportError:
        asyncio.run(serve(args.port, upstreams))


if __name__ == "__main__":
    main()
