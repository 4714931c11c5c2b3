"""The S3 side: a registry URL, a client from the usual environment, errors a person can act on.

Any S3 API works (MinIO in production, SeaweedFS in the tests). The endpoint and credentials
come from `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and
`AWS_SESSION_TOKEN`, `AWS_REGION` when set). Credentials must be in the environment: we never
let boto3 go looking for an instance-metadata service, which does not exist in the building and
would only stall. Path-style addressing, which on-prem servers expect. Requests are retried
(`AWS_MAX_ATTEMPTS`, default 5, with backoff).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import boto3.exceptions
import botocore.config
import botocore.exceptions

from inhouse.weights.errors import WeightsError

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
MAX_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class RegistryUrl:
    bucket: str
    prefix: str  # no leading or trailing '/'; may be empty

    @classmethod
    def parse(cls, url: str) -> RegistryUrl:
        if not url.startswith("s3://"):
            raise WeightsError(f"registry {url!r} must look like s3://BUCKET/PREFIX")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise WeightsError(f"registry {url!r} names no bucket (s3://BUCKET/PREFIX)")
        return cls(bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")


def endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL") or "https://s3.amazonaws.com (AWS_ENDPOINT_URL unset)"


def make_client(max_connections: int = 16) -> Any:
    """An S3 client from the environment; WeightsError when credentials are missing."""
    key_id = os.environ.get("AWS_ACCESS_KEY_ID")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key_id or not secret:
        raise WeightsError(
            "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
            "AWS_ENDPOINT_URL, e.g. http://minio.storage:9000) to the registry's"
        )
    attempts = os.environ.get("AWS_MAX_ATTEMPTS") or str(MAX_ATTEMPTS)
    if not (attempts.isascii() and attempts.isdigit()):
        raise WeightsError(
            f"AWS_MAX_ATTEMPTS={attempts!r} is not a whole number of attempts: set it to one "
            f"(e.g. {MAX_ATTEMPTS}), or unset it for {MAX_ATTEMPTS}"
        )
    config = botocore.config.Config(
        s3={"addressing_style": "path"},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        retries={
            "max_attempts": int(attempts),
            "mode": "standard",
        },
        max_pool_connections=max_connections,
        # Checksums on every request only where the API requires them (older on-prem servers
        # reject the newer default headers).
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session(
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        aws_session_token=os.environ.get("AWS_SESSION_TOKEN"),
        region_name=os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or "us-east-1",
    )
    return session.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL"), config=config)


def error_code(exc: botocore.exceptions.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def is_not_found(exc: Exception) -> bool:
    return isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) in (
        "404",
        "NoSuchKey",
        "NotFound",
    )


@contextlib.contextmanager
def s3_errors(what: str, registry: RegistryUrl, advice: str = "") -> Iterator[None]:
    """Turn boto3's exceptions into a WeightsError that says what to check; `advice` (what
    the command keeps, how to go on) ends every one of them."""
    try:
        yield
    except (boto3.exceptions.S3UploadFailedError, botocore.exceptions.BotoCoreError,
            botocore.exceptions.ClientError) as exc:  # fmt: skip
        error = _worded(what, registry, exc)
        raise WeightsError(f"{error}{advice}") from exc


def _worded(what: str, registry: RegistryUrl, exc: Exception) -> str:
    if isinstance(exc, boto3.exceptions.S3UploadFailedError):
        # s3transfer wraps the server's answer; the ClientError is its context.
        cause = exc.__context__
        if isinstance(cause, botocore.exceptions.ClientError):
            return _client_error(what, registry, cause)
        return f"{what}: upload failed: {exc}"
    if isinstance(exc, botocore.exceptions.EndpointConnectionError):
        return (
            f"{what}: cannot reach the S3 server at {endpoint()}: is it up, and is "
            "AWS_ENDPOINT_URL right?"
        )
    if isinstance(exc, botocore.exceptions.ClientError):
        return _client_error(what, registry, exc)
    if isinstance(exc, botocore.exceptions.ReadTimeoutError):
        return (
            f"{what}: the S3 server at {endpoint()} sent nothing for {READ_TIMEOUT_S} s "
            "mid-transfer (overloaded, or the network stalled)"
        )
    if isinstance(
        exc, botocore.exceptions.HTTPClientError | botocore.exceptions.IncompleteReadError
    ):
        return f"{what}: the connection to the S3 server at {endpoint()} broke mid-transfer ({exc})"
    return f"{what}: S3 client error: {exc}"


def _client_error(what: str, registry: RegistryUrl, exc: botocore.exceptions.ClientError) -> str:
    code = error_code(exc)
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"):
        return (
            f"{what}: the S3 server refused our credentials ({code}): check "
            f"AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy of {registry}"
        )
    if code == "NoSuchBucket":
        return (
            f"{what}: bucket {registry.bucket!r} does not exist at {endpoint()}: create it or "
            "fix the registry URL"
        )
    return f"{what}: S3 error {code}: {exc}"
