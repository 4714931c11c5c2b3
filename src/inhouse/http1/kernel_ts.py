"""Connections that time each read by the kernel's receive timestamp (`SO_TIMESTAMPNS`).

User-space timing stamps a chunk when the client's event loop gets to it; on a busy host the
process may be descheduled for milliseconds first, and that delay lands in TTFT and ITL. The
kernel stamps every received packet when it arrives, whatever the client is doing, so with
`--kernel-timestamps` the client's scheduling delay drops out of the measurement (what is left
is the network path). For TCP, Linux reports the timestamp of the last packet a read consumed,
so chunks that arrived together still share one stamp, as before.

The stamp is on the realtime clock; it becomes a `perf_counter` time through both clocks read
at the same moment, right after the read (`now_mono - (now_real - stamp)`), so clock slewing
over a run cannot bias it. Linux only; elsewhere the flag is refused.
"""

from __future__ import annotations

import asyncio
import platform
import socket
import struct
import sys
import time

from inhouse.errors import SpecError
from inhouse.http1.client import StreamConnection

# NOTE: Python's socket module does not export it; 35 is SO_TIMESTAMPNS(_OLD) in Linux's
# asm-generic/socket.h, which x86-64 and arm64 use (64-bit time_t: the "old" layout).
_GENERIC_LINUX = sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64")
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", 35 if _GENERIC_LINUX else None)
READ_BYTES = 1 << 18
_TIMESPEC = struct.Struct("qq")


def check_available() -> None:
    if SO_TIMESTAMPNS is None or not hasattr(socket.socket, "recvmsg"):
        raise SpecError("--kernel-timestamps needs Linux (SO_TIMESTAMPNS); drop the flag")


async def open_timestamped(host: str, port: int) -> TimestampedConnection:
    """A `client.Connect`: a connection whose reads carry the kernel's receive timestamp."""
    check_available()
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert SO_TIMESTAMPNS is not None
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        await loop.sock_connect(sock, address)
    except OSError:
        sock.close()
        raise
    return TimestampedConnection(sock, loop)


class TimestampedConnection(StreamConnection):
    """A `StreamConnection` that owns its socket and reads it with `recvmsg`."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.sock = sock
        self.loop = loop
        self.is_open = True
        self._pending = b""
        self._ancillary = socket.CMSG_SPACE(_TIMESPEC.size)
        loop.add_reader(sock.fileno(), self._on_readable)

    def write(self, data: bytes) -> None:
        self._pending += data
        self._flush()

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self._pending)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._close(exc)
            return
        self._pending = self._pending[sent:]
        if self._pending:
            self.loop.add_writer(self.sock.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        self.loop.remove_writer(self.sock.fileno())
        self._flush()

    def _on_readable(self) -> None:
        while self.is_open:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(READ_BYTES, self._ancillary)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._close(exc)
                return
            if not data:
                self._close(None)
                return
            now_mono = time.perf_counter()
            now_real = time.time()
            arrived = now_mono
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack(payload[: _TIMESPEC.size])
                    arrived = min(now_mono, now_mono - (now_real - (sec + nsec * 1e-9)))
            self.feed(data, arrived)

    def abort(self) -> None:
        self._close(None)

    def _close(self, exc: Exception | None) -> None:
        if not self.is_open:
            return
        fd = self.sock.fileno()
        if fd >= 0:
            self.loop.remove_reader(fd)
            self.loop.remove_writer(fd)
        self.sock.close()
        self.connection_lost(exc)
