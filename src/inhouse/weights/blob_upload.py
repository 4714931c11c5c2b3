"""A blob uploaded as its file is read, committed only once its digests are checked.

An S3 multipart upload stores nothing under its key until it is completed: the parts go up
while the file is read and hashed (`write`), and the caller completes the upload once the
digests of the very bytes sent are checked, or aborts it and nothing is left. An empty file
sends no part: completing it stores an empty object (S3 servers differ on an empty only
part). Parts go up
`PARTS_IN_FLIGHT` at a time per blob on a shared pool, so one blob's memory is bounded by
about `PARTS_IN_FLIGHT + 2` parts.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor, Future
from typing import Any

PART_BYTES = 16 << 20  # S3 wants parts of at least 5 MiB (the last aside), at most 10,000
MAX_PARTS = 10_000
PARTS_IN_FLIGHT = 2


def part_bytes(size: int) -> int:
    """The part size for a file of `size` bytes: `PART_BYTES`, larger where 10,000 parts would
    not hold it (whole MiB)."""
    least = -(-size // MAX_PARTS)
    return max(PART_BYTES, -(-least // (1 << 20)) << 20)


class BlobUpload:
    """One multipart upload: `write` the bytes in order, `close`, then `complete` or `abort`.
    Parts are uploaded on `pool`; the upload begins with the first."""

    def __init__(self, client: Any, bucket: str, key: str, size: int, pool: Executor) -> None:
        self.client = client
        self.bucket = bucket
        self.key = key
        self.part_bytes = part_bytes(size)
        self.upload_id: str | None = None
        self.completed = False
        self._pool = pool
        self._chunks: list[bytes] = []  # read, not yet sent: less than a part
        self._num_buffered = 0
        self._num_parts = 0
        self._in_flight: deque[Future[dict[str, Any]]] = deque()
        self._parts: list[dict[str, Any]] = []

    def write(self, data: bytes) -> None:
        # NOTE: chunks are joined once per part (no copy at all when a read is a whole part)
        self._chunks.append(data)
        self._num_buffered += len(data)
        while self._num_buffered >= self.part_bytes:
            joined = b"".join(self._chunks)
            self._send(joined[: self.part_bytes])
            rest = joined[self.part_bytes :]
            self._chunks, self._num_buffered = ([rest] if rest else []), len(rest)

    def close(self) -> None:
        """Send what is buffered and wait for every part."""
        if self._num_buffered:
            self._send(b"".join(self._chunks))
            self._chunks, self._num_buffered = [], 0
        while self._in_flight:
            self._parts.append(self._in_flight.popleft().result())

    def _send(self, body: bytes) -> None:
        if self.upload_id is None:
            answer = self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key)
            self.upload_id = str(answer["UploadId"])
        self._num_parts += 1
        self._in_flight.append(self._pool.submit(self._upload_part, self._num_parts, body))
        if len(self._in_flight) > PARTS_IN_FLIGHT:
            self._parts.append(self._in_flight.popleft().result())

    def _upload_part(self, number: int, body: bytes) -> dict[str, Any]:
        answer = self.client.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=body
        )
        return {"ETag": answer["ETag"], "PartNumber": number}

    def complete(self) -> None:
        assert not self._in_flight and not self._num_buffered, "closed"
        if self.upload_id is None:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=b"")
            self.completed = True
            return
        self.client.complete_multipart_upload(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            MultipartUpload={"Parts": self._parts},
        )
        self.completed = True

    def abort(self) -> None:
        """Drop the upload and its parts; a no-op once completed or with no part sent. Called
        once no part is in flight (the parts' pool has shut down): a part landing after the
        abort would be kept."""
        upload_id, self.upload_id = self.upload_id, None
        if upload_id is None or self.completed:
            return
        self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=upload_id)
