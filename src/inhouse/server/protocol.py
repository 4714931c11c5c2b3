"""vLLM's OpenAI-compatible wire format (errors: `inhouse.openai_errors`), by part:

* `request_models`: the request bodies and vLLM's checks of a raw body before its fields;
* `validation`: `parse_body` and vLLM's rendering of validation and field errors;
* `sampling_checks`: vLLM's `SamplingParams` checks of a read request;
* `responses`: the response bodies, `usage` and the SSE framing.

Shapes are those vLLM 0.32 sends (shared/reference/vllm-captures/gen.txt, errors.txt). This
module re-exports each part's public names, for code that imports them from here.
"""

from __future__ import annotations

from inhouse.server.request_models import (
    MAX_STOP_STRINGS,
    AnyResponseFormat,
    ChatCompletionRequest,
    ChatCompletionTool,
    CompletionRequest,
    DetokenizeRequest,
    FunctionDefinition,
    JsonSchemaResponseFormat,
    LegacyStructuralTagResponseFormat,
    ResponseFormat,
    StopParam,
    StreamOptions,
    StructuralTagResponseFormat,
    TokenId,
    TokenizeChatShape,
    TokenizePromptShape,
    TokenizeRequest,
    TokenizeShapes,
    message_dicts,
    stop_list,
)
from inhouse.server.responses import (
    DONE,
    SYSTEM_FINGERPRINT,
    VERSION,
    VLLM_API_VERSION,
    chat_body,
    completion_body,
    new_id,
    sse,
    usage,
)
from inhouse.server.sampling_checks import MAX_LOGPROBS, check_sampling, check_token_ids
from inhouse.server.validation import (
    BODY_PARSE_ERROR,
    BodyParseError,
    FieldError,
    fastapi_errors,
    parse_body,
    validation_error,
)

__all__ = [
    "BODY_PARSE_ERROR",
    "DONE",
    "MAX_LOGPROBS",
    "MAX_STOP_STRINGS",
    "SYSTEM_FINGERPRINT",
    "VERSION",
    "VLLM_API_VERSION",
    "AnyResponseFormat",
    "BodyParseError",
    "ChatCompletionRequest",
    "ChatCompletionTool",
    "CompletionRequest",
    "DetokenizeRequest",
    "FieldError",
    "FunctionDefinition",
    "JsonSchemaResponseFormat",
    "LegacyStructuralTagResponseFormat",
    "ResponseFormat",
    "StopParam",
    "StreamOptions",
    "StructuralTagResponseFormat",
    "TokenId",
    "TokenizeChatShape",
    "TokenizePromptShape",
    "TokenizeRequest",
    "TokenizeShapes",
    "chat_body",
    "check_sampling",
    "check_token_ids",
    "completion_body",
    "fastapi_errors",
    "message_dicts",
    "new_id",
    "parse_body",
    "sse",
    "stop_list",
    "usage",
    "validation_error",
]
