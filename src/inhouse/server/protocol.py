"""vLLM's OpenAI-compatible wire format: request models, response and chunk shapes (errors:
`inhouse.openai_errors`).

Shapes are those vLLM 0.32 sends (shared/reference/vllm-captures/gen.txt, errors.txt): field
names, their order and their nulls. Validation errors read as vLLM's (FastAPI/pydantic errors
rendered as "N validation error(s):" with `type: "Bad Request"` and the field as `param`;
sampling-parameter errors as "… (parameter=X, value=Y)" with `type: "BadRequestError"`).
"""

from __future__ import annotations

import json
import math
import secrets
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, model_validator

from inhouse.openai_errors import ApiError, invalid
from inhouse.server.chat_messages import ChatMessage, VllmChatMessage, read_items, read_message

_M = TypeVar("_M", bound=BaseModel)

VLLM_API_VERSION = "0.32.0"
VERSION = f"{VLLM_API_VERSION}+inhouse"
SYSTEM_FINGERPRINT = f"vllm-{VLLM_API_VERSION}-inhouse"
BODY_PARSE_ERROR = "There was an error parsing the body"
# vLLM's `max_logprobs` default, and `VLLM_MAX_STOP_STRINGS`'.
MAX_LOGPROBS = 20
MAX_STOP_STRINGS = 4
TokenId = Annotated[int, Field(ge=0)]
StopParam = str | Annotated[list[str], Field(max_length=MAX_STOP_STRINGS)] | None


class BodyParseError(Exception):
    """A body FastAPI cannot read (not UTF-8, nested too deep): vLLM answers FastAPI's own
    400, `{"detail": "There was an error parsing the body"}`, not its error shape."""


# -- requests ------------------------------------------------------------------------------


class FieldError(ValueError):
    """A request check that spans fields (vLLM's `VLLMValidationError` in a model validator):
    rendered as vLLM renders it, a plain 400 `BadRequestError` "<message> (parameter=X[,
    value=Y])" with `param` naming the field, not as a validation error list."""

    def __init__(self, message: str, param: str, value: object = None) -> None:
        super().__init__(message)
        self.error = invalid(message, param=param, value=value)
        self.param = param


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class JsonSchemaResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    name: str
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """vLLM's `response_format` is one of three shapes: this one, and two structural-tag ones
    (`structural_tag` is then refused by the simulated engine, naming the types it serves)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaResponseFormat | None = None


class StructuralTagResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["structural_tag"]
    format: Any


class LegacyStructuralTagResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["structural_tag"]
    structures: list[dict[str, Any]]
    triggers: list[str]


AnyResponseFormat = ResponseFormat | StructuralTagResponseFormat | LegacyStructuralTagResponseFormat
# The union's branch names pydantic puts in an error's location, which vLLM's rendering
# does not show.
_UNION_BRANCHES = {
    "ResponseFormat",
    "StructuralTagResponseFormat",
    "LegacyStructuralTagResponseFormat",
    "TokenizePromptShape",
    "TokenizeChatShape",
}


class _SamplingRequest(BaseModel):
    """Fields shared by completions and chat; unknown fields are accepted, as vLLM does."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int = 1
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: StopParam = Field(default_factory=list)
    stop_token_ids: list[int] | None = Field(default_factory=list)
    logit_bias: dict[str, float] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    frequency_penalty: float | None = 0.0
    presence_penalty: float | None = 0.0
    repetition_penalty: float | None = None
    seed: int | None = Field(None, ge=-(2**63), le=2**63 - 1)  # vLLM's: a torch.long
    priority: int = 0
    user: str | None = None
    prompt_logprobs: int | None = None
    response_format: AnyResponseFormat | None = None

    def response_format_dict(self) -> dict[str, Any] | None:
        """The response format as the client sent it."""
        if self.response_format is None:
            return None
        return self.response_format.model_dump(by_alias=True, exclude_unset=True)

    @model_validator(mode="before")
    @classmethod
    def _vllm_request_checks(cls, data: Any) -> Any:
        return cls.checked_raw(data) if isinstance(data, dict) else data

    @classmethod
    def checked_raw(cls, data: dict[str, Any]) -> dict[str, Any]:
        """vLLM's checks of the raw body before its fields are validated (its "before" model
        validators), in the order vLLM makes them; returns the body as vLLM goes on with it."""
        if data.get("stream_options") and not data.get("stream"):
            raise FieldError(
                "Stream options can only be defined when `stream=True`.", "stream_options"
            )
        rf = data.get("response_format")
        if (
            isinstance(rf, dict)
            and rf.get("type") == "json_schema"
            and rf.get("json_schema") is None
        ):
            raise FieldError(
                "When response_format type is 'json_schema', the 'json_schema' field must be "
                "provided.",
                "response_format",
            )
        return data


def _check_logprobs_value(data: dict[str, Any], name: str) -> None:
    """vLLM's request checks on `logprobs`, `top_logprobs` and `prompt_logprobs`."""
    value = data.get(name)
    if value is None or isinstance(value, bool):
        return
    if not isinstance(value, int | float):
        raise FieldError(f"`{name}` must be an integer.", name, value)
    if name == "prompt_logprobs" and data.get("stream") and (value > 0 or value == -1):
        raise FieldError("`prompt_logprobs` are not available when `stream=True`.", name)
    if value < 0 and value != -1:
        raise FieldError(f"`{name}` must be a positive value or -1.", name, value)


class CompletionRequest(_SamplingRequest):
    prompt: list[TokenId] | list[list[TokenId]] | str | list[str] | None = None
    max_tokens: int | None = 16
    echo: bool | None = False
    logprobs: int | None = None
    suffix: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _null_max_tokens_is_the_default(cls, data: Any) -> Any:
        """vLLM's `normalize_null_max_tokens`: an explicit null means 16, not "the rest"."""
        if isinstance(data, dict) and data.get("max_tokens") is None:
            data = dict(data, max_tokens=cls.model_fields["max_tokens"].default)
        return data

    @model_validator(mode="before")
    @classmethod
    def _logprobs(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in ("prompt_logprobs", "logprobs"):
                _check_logprobs_value(data, name)
        return data


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as the client sent them, for the chat template (each one's lazily checked
    items read first: `read_message`)."""
    return [read_message(message) for message in messages]


class FunctionDefinition(BaseModel):
    """A tool's function as vLLM types it: a name is required, the schema is an object."""

    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ChatCompletionTool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"] = "function"
    function: FunctionDefinition


class ChatCompletionRequest(_SamplingRequest):
    messages: list[VllmChatMessage]
    tools: list[ChatCompletionTool] | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    logprobs: bool | None = False
    top_logprobs: int | None = 0

    @classmethod
    def checked_raw(cls, data: dict[str, Any]) -> dict[str, Any]:
        """vLLM's chat checks before validation: it walks `messages` first (a value that
        cannot be walked is Python's TypeError, as a plain 400), refuses both generation flags
        as sent, checks the logprobs and the shared checks, then lists each message's
        `tool_calls` (a string or an object becomes a list of its characters or keys; a
        number cannot be listed: Python's TypeError again)."""
        try:
            iter(data.get("messages", []))
        except TypeError as exc:
            raise invalid(str(exc)) from None
        if data.get("continue_final_message") and data.get("add_generation_prompt"):
            # Both as sent; the default generation prompt is the renderer's to refuse.
            raise invalid(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        for name in ("prompt_logprobs", "top_logprobs"):
            _check_logprobs_value(data, name)
        top = data.get("top_logprobs")
        if isinstance(top, int | float) and (top == -1 or top > 0) and not data.get("logprobs"):
            raise FieldError(
                "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
            )
        return _listed_tool_calls(super().checked_raw(data))

    @model_validator(mode="after")
    def _read_tool_calls(self) -> ChatCompletionRequest:
        """vLLM's chat route reads each message's tool calls once the fields are valid: a call
        that fits no tool-call type is a validation error located by the call's index (an
        `ApiError`, not a `ValueError`: pydantic lets it through as it is)."""
        for message in self.messages:
            if (exc := read_items(message, "tool_calls")) is not None:
                raise validation_error(fastapi_errors(exc))
        return self


def _listed_tool_calls(data: dict[str, Any]) -> dict[str, Any]:
    messages = data.get("messages")
    if not isinstance(messages, list):
        return data
    listed: list[Any] = []
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if calls is not None and not isinstance(calls, list):
            try:
                message = {**message, "tool_calls": list(calls)}
            except TypeError as exc:
                raise invalid(str(exc)) from None
        listed.append(message)
    return {**data, "messages": listed}


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str | None = None
    messages: list[VllmChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False


class TokenizePromptShape(BaseModel):
    """vLLM's `TokenizeCompletionRequest`: its typed fields, in its order."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatShape(BaseModel):
    """vLLM's `TokenizeChatRequest`: its typed fields, in its order."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[VllmChatMessage]
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    tools: list[ChatCompletionTool] | None = None  # rendered into the prompt: typed, as in vLLM


class TokenizeShapes(RootModel[TokenizePromptShape | TokenizeChatShape]):
    """vLLM's /tokenize body is one of two requests, a prompt one and a chat one: a body
    that fits neither fails both, and its errors say so (parsed first, for them)."""


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    tokens: list[TokenId]


def parse_body(raw: bytes, content_type: str, model: type[_M]) -> _M:
    """Parse a JSON body into `model`, raising vLLM's 400s for bad media type, JSON or fields
    (`BodyParseError` for a body FastAPI cannot read at all)."""
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise ApiError(
            400,
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            error_type="Bad Request",
        )
    if not raw:  # FastAPI reads no body as a missing one
        raise validation_error([_missing(("body",), None)])
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        error = {
            "type": "json_invalid",
            "loc": ("body", exc.pos),
            "msg": "JSON decode error",
            "input": {},
            "ctx": {"error": exc.msg},
        }
        raise validation_error([error]) from None
    except (ValueError, RecursionError):
        # Not UTF-8, or nested deeper than the parser goes: FastAPI's words for any body it
        # cannot parse, as vLLM answers them.
        raise BodyParseError(BODY_PARSE_ERROR) from None
    if data is None:
        raise validation_error([_missing(("body",), None)])
    if not isinstance(data, dict):
        error = {
            "type": "model_attributes_type",
            "loc": ("body",),
            "msg": "Input should be a valid dictionary or object to extract fields from",
            "input": data,
        }
        raise validation_error([error])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, FieldError):
                raise cause.error from None
        raise validation_error(fastapi_errors(exc)) from None


def fastapi_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors as FastAPI lists a body's: located under `body`, context values as
    text."""
    errors: list[dict[str, Any]] = []
    for err in exc.errors(include_url=False):
        item: dict[str, Any] = {
            "type": err["type"],
            "loc": ("body", *err["loc"]),
            "msg": err["msg"],
            "input": err.get("input"),
        }
        if err.get("ctx"):
            item["ctx"] = {k: _ctx_value(v) for k, v in err["ctx"].items()}
        errors.append(item)
    return errors


def _missing(loc: tuple[str, ...], value: object) -> dict[str, Any]:
    return {"type": "missing", "loc": loc, "msg": "Field required", "input": value}


def _ctx_value(value: object) -> object:
    """A pydantic error's context value as FastAPI shows it: numbers and text as they are,
    anything else (an exception) as its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _summarize(value: object) -> object:
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "...[truncated]"
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = str(value)
    return text if len(text) <= 200 else text[:200] + "...[truncated]"


def validation_error(errors: list[dict[str, Any]], param: str | None = None) -> ApiError:
    """FastAPI-style validation errors, rendered as vLLM renders them; `param` is the first
    error's location unless given."""
    count = len(errors)
    lines = []
    for err in errors[:10]:
        shown = dict(err)
        shown["loc"] = ".".join(str(p) for p in err["loc"] if not _is_internal_loc(str(p)))
        if "input" in shown:
            shown["input"] = _summarize(shown["input"])
        lines.append(f"  {shown}")
    if count > 10:  # "errors" even for one more: vLLM's label is the whole count's (odd)
        lines.append(f"  ...and {count - 10} more errors")
    message = f"{count} validation {'error' if count == 1 else 'errors'}:\n" + "\n".join(lines)
    first_loc = errors[0]["loc"] if errors else ()
    if param is None:
        param = ".".join(str(p) for p in first_loc if not _is_internal_loc(str(p))) or None
    return ApiError(400, message, param=param, error_type="Bad Request")


# pydantic-core's schema kinds that vLLM drops from an error's location (its
# `_INTERNAL_LOC_MARKERS`, vllm/entrypoints/serve/exception_handling/handlers/validation.py):
# a field named like one ("arguments" of a tool call's function) is dropped too.
_INTERNAL_LOC = {
    "function-wrap",
    "function-after",
    "function-before",
    "function-plain",
    "json-or-python",
    "lax-or-strict",
    "chain",
    "default",
    "nullable",
    "tagged-union",
    "union",
    "call",
    "arguments",
    "is-instance",
    "is-subclass",
    "callable",
    "str",
    "int",
    "float",
    "bool",
    "bytes",
    "bytearray",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "complex",
    "none",
    "nonetype",
}


def _is_internal_loc(segment: str) -> bool:
    return (
        any(c in segment for c in "[](){}")
        or segment.lower() in _INTERNAL_LOC
        or segment in _UNION_BRANCHES
    )


def check_sampling(request: _SamplingRequest, max_tokens: int | None, vocab_size: int) -> None:
    """vLLM's `SamplingParams` checks that matter for the simulated engine, in vLLM's order
    and words (most name no parameter: `param` null, no suffix, as vLLM sends them). The
    out-of-vocabulary checks are `check_token_ids`, apart: vLLM makes them once a stream
    has started."""
    if request.n < 1:
        raise invalid(f"n must be at least 1, got {request.n}.")
    if request.n != 1:
        raise invalid(
            f"n must be 1 in the simulated engine, got {request.n}.", param="n", value=request.n
        )
    _check_sampling_ranges(request)
    _check_max_logprobs(request, vocab_size)
    _check_served(request)
    if max_tokens is not None and max_tokens < 1:
        raise invalid(
            f"max_tokens must be at least 1, got {max_tokens}.",
            param="max_tokens",
            value=max_tokens,
        )
    if request.min_tokens < 0:
        raise invalid(f"min_tokens must be greater than or equal to 0, got {request.min_tokens}.")
    if max_tokens is not None and request.min_tokens > max_tokens:
        raise invalid(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got "
            f"{request.min_tokens}."
        )
    if any(not s for s in stop_list(request.stop)):
        raise invalid("stop cannot contain an empty string.")


def _check_max_logprobs(request: _SamplingRequest, vocab_size: int) -> None:
    """vLLM's cap on logprobs asked for (`max_logprobs`, 20); -1 asks for the whole
    vocabulary, so it is refused naming the vocabulary's size (odd, as vLLM does)."""
    asked: int | None = None
    if isinstance(request, CompletionRequest):
        asked = request.logprobs
    elif isinstance(request, ChatCompletionRequest) and request.logprobs:
        asked = request.top_logprobs or 0
    if asked is None:
        return
    count = vocab_size if asked == -1 else asked
    if count > MAX_LOGPROBS:
        raise invalid(
            f"Requested sample logprobs of {count}, which is greater than max allowed: "
            f"{MAX_LOGPROBS}",
            param="logprobs",
            value=count,
        )


def check_token_ids(request: _SamplingRequest, vocab_size: int) -> None:
    """vLLM's checks of the token ids in `stop_token_ids` and `logit_bias` against the
    vocabulary. vLLM makes them in the engine's input processor, after a streamed response
    has begun: a streamed request gets this refusal as an SSE error event."""
    bad_keys = [k for k in request.logit_bias or {} if not _is_int_text(k)]
    if bad_keys:
        raise invalid(
            f"logit_bias contains key(s) that cannot be converted to integer token IDs: {bad_keys}",
            param="logit_bias",
            value=bad_keys,
        )
    for name, ids in (
        ("stop_token_ids", list(request.stop_token_ids or [])),
        ("logit_bias", [int(k) for k in request.logit_bias or {}]),
    ):
        bad = [t for t in ids if not 0 <= t < vocab_size]
        if bad:
            raise invalid(
                f"token_id(s) {bad} in {name} contain out-of-vocab token ids. Vocabulary "
                f"size: {vocab_size}",
                param=name,
                value=bad,
            )


def _is_int_text(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _check_served(request: _SamplingRequest) -> None:
    """Fields asking for what the simulated engine cannot produce are refused, naming the
    field, rather than answered with a null the client did not ask for."""
    unserved: list[tuple[str, object]] = []
    if isinstance(request, CompletionRequest):
        if request.suffix is not None:  # vLLM's words, for a model without FIM rendering
            prompt = request.prompt
            text = isinstance(prompt, str) or bool(prompt and isinstance(prompt[0], str))
            message = (
                "suffix is only supported for models with FIM completion rendering"
                if text
                else "suffix requires text prompt input for FIM completion rendering"
            )
            raise ApiError(400, message, param="suffix")
        if request.echo:
            raise invalid(
                "The simulated engine does not echo the prompt; leave `echo` unset.",
                param="echo",
                value=True,
            )
        unserved.append(("logprobs", request.logprobs))
    elif isinstance(request, ChatCompletionRequest):
        unserved.append(("logprobs", request.logprobs or None))
        unserved.append(("top_logprobs", request.top_logprobs or None))
    unserved.append(("prompt_logprobs", request.prompt_logprobs))
    for name, value in unserved:
        if value is not None:
            raise invalid(
                "The simulated engine does not sample from a model, so it has no logprobs to "
                f"return; leave `{name}` unset.",
                param=name,
                value=value,
            )


def _check_sampling_ranges(request: _SamplingRequest) -> None:
    """The sampling values the simulated engine ignores, still refused where vLLM refuses."""
    for name in ("presence_penalty", "frequency_penalty"):
        penalty = getattr(request, name)
        if penalty is not None and not -2.0 <= penalty <= 2.0:
            raise invalid(f"{name} must be in [-2, 2], got {penalty}.")
    repetition = request.repetition_penalty
    if repetition is not None and not math.isfinite(repetition):
        raise invalid(f"repetition_penalty must be a finite number, got {repetition}.")
    if repetition is not None and repetition <= 0.0:
        raise invalid(f"repetition_penalty must be greater than zero, got {repetition}.")
    temperature = request.temperature
    if temperature is not None and not math.isfinite(temperature):
        raise invalid(
            f"temperature must be a finite number, got {temperature}.",
            param="temperature",
            value=temperature,
        )
    if temperature is not None and temperature < 0.0:
        raise invalid(
            f"temperature must be non-negative, got {temperature}.",
            param="temperature",
            value=temperature,
        )
    if temperature is not None and temperature > 2.0:  # vLLM 0.32 caps it, as OpenAI does
        raise invalid(
            f"temperature must be in [0, 2], got {temperature}.",
            param="temperature",
            value=temperature,
        )
    top_p = request.top_p
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise invalid(f"top_p must be in (0, 1], got {top_p}.", param="top_p", value=top_p)
    top_k = request.top_k
    if top_k is not None and top_k < -1:
        raise invalid(f"top_k must be 0 (disable), or at least 1, got {top_k}.")
    min_p = request.min_p
    if min_p is not None and not 0.0 <= min_p <= 1.0:
        raise invalid(f"min_p must be in [0, 1], got {min_p}.")


def stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


# -- responses -----------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(8)}"


def usage(
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int | None = None,
    created_cache_tokens: int | None = None,
    details: bool = True,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }
    if details:
        body["prompt_tokens_details"] = {
            "cached_tokens": cached_tokens or 0,
            "created_cache_tokens": created_cache_tokens,
            "multimodal_tokens": None,
        }
        body["completion_tokens_details"] = None
    return body


def completion_body(
    request_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    stop_reason: str | int | None,
    usage_body: dict[str, Any],
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage_body,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def chat_body(
    request_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    stop_reason: str | int | None,
    usage_body: dict[str, Any],
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                },
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": stop_reason,
                "token_ids": None,
                "routed_experts": None,
            }
        ],
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage_body,
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def sse(data: dict[str, Any] | str) -> bytes:
    if isinstance(data, str):
        payload = data
    else:
        payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


DONE = b"data: [DONE]\n\n"
