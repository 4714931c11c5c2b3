"""vLLM's OpenAI-compatible request models: completions, chat, tokenize and detokenize bodies,
their fields as vLLM 0.32 types them and the checks vLLM makes of a raw body before its fields
(shared/reference/vllm-captures/gen.txt, errors.txt). Parsing and the errors' wording are
`validation`'s; the sampling checks made once a request is read, `sampling_checks`'.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel, model_validator

from inhouse.openai_errors import invalid
from inhouse.server.chat_messages import ChatMessage, VllmChatMessage, read_items, read_message
from inhouse.server.validation import FieldError, fastapi_errors, validation_error

# vLLM's `VLLM_MAX_STOP_STRINGS`.
MAX_STOP_STRINGS = 4
TokenId = Annotated[int, Field(ge=0)]
StopParam = str | Annotated[list[str], Field(max_length=MAX_STOP_STRINGS)] | None


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


def stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
