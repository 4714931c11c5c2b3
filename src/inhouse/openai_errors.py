"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, and vLLM's words.

One error type (`ApiError`) for both shells, the engine server (`inhouse.server`) and the gateway
(`inhouse.gateway`); every message vLLM has for a case is written here once, so the engine and
the gateway refusing the same request say the same thing (shared/reference/vllm-captures/
errors.txt). The pure core (`inhouse.engine`) words nothing: it returns a `Rejection` (what and
the numbers) and `rejection_message` words it.

Types follow vLLM's where vLLM has the case (400 `BadRequestError`, 404 `NotFoundError`, 503
`Service Unavailable`); the gateway's own cases use OpenAI's names (401 `invalid_api_key`, 403
`permission_denied`, 429 `rate_limit_exceeded`, 413 `request_too_large`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from http import HTTPStatus

from inhouse.engine.rejection import Rejection, RejectionKind

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

BUSY_MESSAGE = (
    "The engine is currently busy and cannot accept new requests. Please try again later or on "
    "a different instance."
)
DRAINING_MESSAGE = (
    "The engine is shutting down and cannot accept new requests. Please retry on a different "
    "instance."
)
LOADING_MESSAGE = "The model is still loading. Please try again later."
# vLLM's `EngineDeadError`: the engine loop failed; requests get a 500, /health a 503.
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."


def text_only_message(model: str) -> str:
    """vLLM's words (0.32) for an image, audio, video or file part sent to a text-only model."""
    return f"{model} is not a multimodal model"


class ApiError(Exception):
    """A refusal: HTTP status, message, offending `param`, metric `reason`, extra headers.

    The message is sent as given; `invalid` adds vLLM's " (parameter=X, value=Y)" suffix."""

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


def error_json(message: str, error_type: str, param: str | None, code: int) -> bytes:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def error_event(message: str, code: int = 502) -> bytes:
    """The SSE error event vLLM sends when a stream fails after it started, then [DONE]."""
    error = {"error": {"message": message, "type": "BadGateway", "param": None, "code": code}}
    return b"data: " + json.dumps(error).encode() + b"\n\ndata: [DONE]\n\n"


def invalid(
    message: str, param: str | None = None, value: object = None, reason: str = "bad_request"
) -> ApiError:
    """A 400 as vLLM's `VLLMValidationError` words it: "<message> (parameter=X, value=Y)"."""
    if param is not None:
        extras = f"parameter={param}" if value is None else f"parameter={param}, value={value}"
        message = f"{message} ({extras})"
    return ApiError(400, message, param=param, reason=reason)


# -- vLLM's words ---------------------------------------------------------------------------


def unknown_model(name: str, valid: Iterable[str]) -> str:
    return f"The model `{name}` does not exist. Valid aliases: {', '.join(valid)}."


def prompt_over_context(max_len: int, count: int, at_least: bool = True) -> str:
    """The prompt alone is longer than the context (vLLM counts a text prompt only up to
    max_model_len + 1 tokens: "at least")."""
    qualifier = "at least " if at_least else ""
    return (
        f"This model's maximum context length is {max_len} tokens. However, your prompt "
        f"contains {qualifier}{count} input tokens, which exceeds this limit even "
        "without any output tokens. Please reduce the length of the input prompt."
    )


def max_tokens_over_context(requested: int, max_len: int, name: str = "max_tokens") -> str:
    """`name` is the field the limit came from: chat's `max_completion_tokens` when given."""
    return (
        f"{name}={requested} cannot be greater than max_model_len={max_len}. "
        "Please request fewer output tokens."
    )


def max_tokens_too_large(requested: int, max_len: int, num_prompt: int) -> str:
    return (
        f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This "
        f"model's maximum context length is {max_len} tokens and your request has "
        f"{num_prompt} input tokens ({requested} > {max_len} - {num_prompt})."
    )


def rejection_message(rejection: Rejection) -> str:
    """The words for what the engine core refused (`EngineCore.add_request`)."""
    num_prompt, num_output, limit = (
        rejection.num_prompt_tokens,
        rejection.num_output_tokens,
        rejection.limit,
    )
    if rejection.kind is RejectionKind.PROMPT_OVER_CONTEXT:
        return (
            f"This model's maximum context length is {limit} tokens. However, your "
            f"request has {num_prompt} input tokens. Please reduce the length of "
            "the input messages."
        )
    if rejection.kind is RejectionKind.REQUEST_OVER_CONTEXT:
        return (
            f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {num_prompt + num_output} tokens ({num_prompt} in "
            f"the messages, {num_output} in the completion). Please reduce the length of "
            "the messages or completion."
        )
    return (
        f"The request needs {num_prompt + num_output} tokens of KV cache but "
        f"the whole cache holds {limit}. Reduce the prompt or max_tokens."
    )
