"""S3 clients for tests that wrap the real one: count what is fetched, or fail part-way, as a
network that drops does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class DroppedConnection(ConnectionError):
    pass


class _Body:
    def __init__(self, body: Any, client: CountingClient) -> None:
        self._body = body
        self._client = client

    def read(self, amt: int | None = None) -> bytes:
        if self._client.fail_after_bytes is not None:
            if self._client.blob_bytes >= self._client.fail_after_bytes:
                raise self._client.error()
            if amt is not None:
                amt = min(amt, self._client.fail_after_bytes - self._client.blob_bytes)
        chunk: bytes = self._body.read(amt)
        self._client.blob_bytes += len(chunk)
        return chunk

    def close(self) -> None:
        self._body.close()


class CountingClient:
    """Counts GETs and bytes of file blobs (`/blobs/` keys); with `fail_after_bytes`, every
    blob read past that many bytes in total raises `error()`, like a dropped connection."""

    def __init__(
        self,
        client: Any,
        fail_after_bytes: int | None = None,
        error: Callable[[], Exception] = lambda: DroppedConnection("connection dropped (test)"),
    ) -> None:
        self._client = client
        self.fail_after_bytes = fail_after_bytes
        self.error = error
        self.blob_gets = 0
        self.blob_bytes = 0
        self.keys: list[str] = []

    def get_object(self, **kwargs: Any) -> Any:
        response = self._client.get_object(**kwargs)
        self.keys.append(kwargs["Key"])
        if "/blobs/" in kwargs["Key"]:
            self.blob_gets += 1
            response["Body"] = _Body(response["Body"], self)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
