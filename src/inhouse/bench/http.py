"""The bench's client: the request function (`request_func.send_request`) over a transport of
keep-alive connections to one target (`inhouse.http1.client.StreamPool`), reading with the
kernel's receive timestamps (`http1.kernel_ts`) or as the event loop gets to each read.

Why not httpx or aiohttp: per SSE chunk they run several coroutines and buffer layers; here a
chunk costs one `data_received` call, one parser callback, a `bytes.find` and one JSON parse.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from inhouse.bench.metrics import Outcome
from inhouse.bench.request_func import Job, Target, send_request
from inhouse.http1.client import StreamPool, connect_tcp
from inhouse.http1.kernel_ts import open_timestamped


class Client:
    """A pool of keep-alive connections to one target, sending `Job`s."""

    def __init__(self, target: Target, kernel_timestamps: bool = False) -> None:
        self.target = target
        self.kernel_timestamps = kernel_timestamps
        connect = open_timestamped if kernel_timestamps else connect_tcp
        self.transport = StreamPool(target.host, target.port, connect)

    @property
    def num_opened(self) -> int:
        return self.transport.num_opened

    @property
    def num_open_errors(self) -> int:
        return self.transport.num_open_errors

    @property
    def num_retries(self) -> int:
        return self.transport.num_retries

    async def prewarm(self, num_connections: int) -> None:
        """Open connections ahead of the run (a burst then finds them ready)."""
        await self.transport.prewarm(num_connections)

    def send(self, job: Job) -> Coroutine[Any, Any, Outcome]:
        """Send now; the outcome says what happened (never raises for HTTP or socket errors).

        A kept-alive connection the server closed while idle fails before any byte comes back;
        such a request is sent once more on a new connection (t_send stays the first one)."""
        return send_request(self.transport, self.target, job)

    def close(self) -> None:
        self.transport.close()
