"""A chat message checked as vLLM 0.32 checks it, so a malformed one is refused in vLLM's words.

vLLM types a message as a union of eight classes: OpenAI's six (developer, system, user,
assistant, tool, function), its own custom-role one (any role string) and openai-harmony's
`Message`. A message that fits none fails every class, and the 400 lists each class's errors
(11 for a missing role, 22 for content of the wrong type), with `param` the first one's location
(`body.messages.0.ChatCompletionDeveloperMessageParam.role`). The classes below have the fields,
field order and types of those classes (read from the installed vLLM 0.32 and openai packages),
so pydantic finds the same errors in the same order; a message that fits one is then read as the
plain `ChatMessage` the engine uses, extra keys and all.

OpenAI's classes take content parts and tool calls as an `Iterable`, which pydantic checks
lazily: a list whose items fit no type passes the union, and fails only when the items are read.
vLLM reads content parts as it renders the conversation, after the request's other checks, and
answers "N validation errors for ValidatorIterator" in a plain 400 `BadRequestError` with no
`param` (its words, odd as they are); its chat route lists tool calls right after validation
(`protocol.ChatCompletionRequest`). `checked_message` keeps the unread items on the message for
`read_items` to read when vLLM would.

NOTE: a message that fits one of vLLM's classes but not `ChatMessage` (a harmony-shaped
message with no `role`) gets the engine's own error.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Any, Literal, Required

from pydantic import (
    BaseModel,
    ConfigDict,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    WrapValidator,
)
from pydantic_core.core_schema import ValidatorFunctionWrapHandler
from typing_extensions import TypedDict

from inhouse.openai_errors import invalid


class PromptCacheBreakpoint(TypedDict, total=False):
    mode: Required[Literal["explicit"]]
    ttl: Literal["30m", "12h"]


class ChatCompletionContentPartTextParam(TypedDict, total=False):
    text: Required[str]
    type: Required[Literal["text"]]
    prompt_cache_breakpoint: PromptCacheBreakpoint


class ImageURL(TypedDict, total=False):
    url: Required[str]
    detail: Literal["auto", "low", "high", "original"]


class ChatCompletionContentPartImageParam(TypedDict, total=False):
    image_url: Required[ImageURL]
    type: Required[Literal["image_url"]]
    prompt_cache_breakpoint: PromptCacheBreakpoint


class InputAudio(TypedDict, total=False):
    data: Required[str]
    format: Required[Literal["wav", "mp3"]]


class ChatCompletionContentPartInputAudioParam(TypedDict, total=False):
    input_audio: Required[InputAudio]
    type: Required[Literal["input_audio"]]
    prompt_cache_breakpoint: PromptCacheBreakpoint


class FileFile(TypedDict, total=False):
    file_data: str
    file_id: str
    filename: str


class File(TypedDict, total=False):
    file: Required[FileFile]
    type: Required[Literal["file"]]
    prompt_cache_breakpoint: PromptCacheBreakpoint


# vLLM's own part types, which only its custom-role message class takes.


class MediaURL(TypedDict, total=False):
    url: Required[str]


class ChatCompletionContentPartAudioParam(TypedDict, total=False):
    audio_url: Required[MediaURL]
    type: Required[Literal["audio_url"]]


class ChatCompletionContentPartVideoParam(TypedDict, total=False):
    video_url: Required[MediaURL]
    type: Required[Literal["video_url"]]


class CustomChatCompletionContentPILImageParam(TypedDict, total=False):
    image_pil: Any
    uuid: str | None


class CustomChatCompletionContentSimpleImageParam(TypedDict, total=False):
    image_url: str | None
    uuid: str | None


Embeds = str | dict[str, str | list[int | float]] | None


class ChatCompletionContentPartImageEmbedsParam(TypedDict, total=False):
    image_embeds: Embeds
    type: Required[Literal["image_embeds"]]
    uuid: str | None


class ChatCompletionContentPartAudioEmbedsParam(TypedDict, total=False):
    audio_embeds: Embeds
    type: Required[Literal["audio_embeds"]]
    uuid: str | None


class ChatCompletionContentPartVideoEmbedsParam(TypedDict, total=False):
    video_embeds: Embeds
    type: Required[Literal["video_embeds"]]
    uuid: str | None


class ChatCompletionContentPartPromptEmbedsParam(TypedDict, total=False):
    data: Required[str]
    type: Required[Literal["prompt_embeds"]]


class CustomChatCompletionContentSimpleAudioParam(TypedDict, total=False):
    audio_url: str | None


class CustomChatCompletionContentSimpleVideoParam(TypedDict, total=False):
    video_url: str | None
    uuid: str | None


class CustomChatCompletionContentToolReferenceParam(TypedDict, total=False):
    name: str
    type: Literal["tool_reference"]


class CustomThinkCompletionContentParam(TypedDict, total=False):
    thinking: Required[str]
    closed: bool
    type: Required[Literal["thinking"]]


class ChatCompletionContentPartRefusalParam(TypedDict, total=False):
    refusal: Required[str]
    type: Required[Literal["refusal"]]


class Audio(TypedDict, total=False):
    id: Required[str]


class FunctionCall(TypedDict, total=False):
    arguments: Required[str]
    name: Required[str]


class Function(TypedDict, total=False):
    arguments: Required[str]
    name: Required[str]


class ChatCompletionMessageFunctionToolCallParam(TypedDict, total=False):
    id: Required[str]
    function: Required[Function]
    type: Required[Literal["function"]]


class Custom(TypedDict, total=False):
    input: Required[str]
    name: Required[str]


class ChatCompletionMessageCustomToolCallParam(TypedDict, total=False):
    id: Required[str]
    custom: Required[Custom]
    type: Required[Literal["custom"]]


UserPart = (
    ChatCompletionContentPartTextParam
    | ChatCompletionContentPartImageParam
    | ChatCompletionContentPartInputAudioParam
    | File
)
AssistantPart = ChatCompletionContentPartTextParam | ChatCompletionContentPartRefusalParam
ToolCall = ChatCompletionMessageFunctionToolCallParam | ChatCompletionMessageCustomToolCallParam
AnyPart = (
    UserPart
    | ChatCompletionContentPartAudioParam
    | ChatCompletionContentPartVideoParam
    | ChatCompletionContentPartRefusalParam
    | CustomChatCompletionContentPILImageParam
    | CustomChatCompletionContentSimpleImageParam
    | ChatCompletionContentPartImageEmbedsParam
    | ChatCompletionContentPartAudioEmbedsParam
    | ChatCompletionContentPartVideoEmbedsParam
    | ChatCompletionContentPartPromptEmbedsParam
    | CustomChatCompletionContentSimpleAudioParam
    | CustomChatCompletionContentSimpleVideoParam
    | CustomChatCompletionContentToolReferenceParam
    | str
    | CustomThinkCompletionContentParam
)


class ChatCompletionDeveloperMessageParam(TypedDict, total=False):
    content: Required[str | Iterable[ChatCompletionContentPartTextParam]]
    role: Required[Literal["developer"]]
    name: str


class ChatCompletionSystemMessageParam(TypedDict, total=False):
    content: Required[str | Iterable[ChatCompletionContentPartTextParam]]
    role: Required[Literal["system"]]
    name: str


class ChatCompletionUserMessageParam(TypedDict, total=False):
    content: Required[str | Iterable[UserPart]]
    role: Required[Literal["user"]]
    name: str


class ChatCompletionAssistantMessageParam(TypedDict, total=False):
    role: Required[Literal["assistant"]]
    audio: Audio | None
    content: str | Iterable[AssistantPart] | None
    function_call: FunctionCall | None
    name: str
    refusal: str | None
    tool_calls: Iterable[ToolCall]


class ChatCompletionToolMessageParam(TypedDict, total=False):
    content: Required[str | Iterable[ChatCompletionContentPartTextParam]]
    role: Required[Literal["tool"]]
    tool_call_id: Required[str]


class ChatCompletionFunctionMessageParam(TypedDict, total=False):
    content: Required[str | None]
    name: Required[str]
    role: Required[Literal["function"]]


class CustomChatCompletionMessageParam(TypedDict, total=False):
    role: Required[str]
    content: str | list[AnyPart]
    name: str
    tool_call_id: str | None
    tool_calls: list[ChatCompletionMessageFunctionToolCallParam] | None
    reasoning: str | None
    tools: list[dict[str, Any]] | None
    task: str | None


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    DEVELOPER = "developer"
    TOOL = "tool"


class Author(BaseModel):
    role: Role
    name: str | None = None


class Content(BaseModel):
    """A harmony content part: any object (its kinds are subclasses)."""


class Message(BaseModel):
    """openai-harmony's message, the last class vLLM tries."""

    author: Author
    content: list[Content] = []
    channel: str | None = None
    recipient: str | None = None
    content_type: str | None = None


_VLLM_MESSAGE: TypeAdapter[Any] = TypeAdapter(
    ChatCompletionDeveloperMessageParam
    | ChatCompletionSystemMessageParam
    | ChatCompletionUserMessageParam
    | ChatCompletionAssistantMessageParam
    | ChatCompletionToolMessageParam
    | ChatCompletionFunctionMessageParam
    | CustomChatCompletionMessageParam
    | Message
)


class ChatMessage(BaseModel):
    """A chat message as the engine reads it: a role (any string, as vLLM's custom message type
    allows) and content that is text, a list of content parts, or null. Parts and tool calls
    vLLM checks lazily stay unread (`read_items`) until vLLM would read them."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[Any] | dict[str, Any] | None = None  # parts unread: any items
    _unread: dict[str, Iterable[Any]] = PrivateAttr(default_factory=dict)


def read_items(message: ChatMessage, name: str) -> ValidationError | None:
    """Reads the lazily checked items of the message's field `name`, once: the error an item
    that fits no type raises, or None (none failed, or nothing left unread)."""
    items = message._unread.pop(name, None)
    if items is None:
        return None
    try:
        list(items)
    except ValidationError as exc:
        return exc
    return None


def read_message(message: ChatMessage) -> dict[str, Any]:
    """The message as the client sent it, for the chat template, its unread items read first
    in the order of its class's fields, as vLLM's renderer reads them: vLLM's plain 400 if one
    fits no type."""
    for name in list(message._unread):
        if (exc := read_items(message, name)) is not None:
            raise invalid(str(exc))
    return message.model_dump(exclude_unset=True)


def _is_lazy(item: object) -> bool:
    return isinstance(item, Iterable) and not isinstance(item, str | bytes | dict | list)


def checked_message(value: Any, handler: ValidatorFunctionWrapHandler) -> ChatMessage:
    """`value` checked against vLLM's message classes (their errors if it fits none; FastAPI
    validates with `from_attributes`, hence harmony's `model_attributes_type`), then taken as
    a `ChatMessage` that keeps the fields pydantic checks lazily, unread."""
    if isinstance(value, ChatMessage):
        return value
    checked = _VLLM_MESSAGE.validate_python(value, from_attributes=True)
    message = ChatMessage.model_validate(value)
    if isinstance(checked, dict):
        message._unread = {name: item for name, item in checked.items() if _is_lazy(item)}
    return message


VllmChatMessage = Annotated[ChatMessage, WrapValidator(checked_message)]
