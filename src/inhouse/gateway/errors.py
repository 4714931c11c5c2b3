"""Every refusal in OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.

Types and messages follow vLLM's where vLLM has the case (400 `BadRequestError` naming the
`param`, 404 `NotFoundError` for an unknown model, 503 `Service Unavailable`); the gateway's own
cases use OpenAI's names (401 `invalid_api_key`, 403 `permission_denied`, 429
`rate_limit_exceeded`, 413 `request_too_large`)."""

from __future__ import annotations

from http import HTTPStatus

from inhouse.http1.errors import error_json

_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    413: "RequestTooLargeError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGateway",
    503: "Service Unavailable",
    504: "GatewayTimeout",
}


class GatewayError(Exception):
    """A refusal: HTTP status, message, offending `param`, metric `reason`, extra headers."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        reason: str = "bad_request",
        retry_after_s: float | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.reason = reason
        self.retry_after_s = retry_after_s
        self.error_type = error_type or _TYPES.get(status) or HTTPStatus(status).phrase

    def body(self) -> bytes:
        return error_json(self.message, self.error_type, self.param, self.status)

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [(b"content-type", b"application/json")]
        if self.retry_after_s is not None:
            seconds = max(1, int(self.retry_after_s + 0.999))
            out.append((b"retry-after", str(seconds).encode()))
        return out


def bad_param(param: str, message: str) -> GatewayError:
    return GatewayError(400, f"{message} (parameter={param})", param=param)
