"""A request body as the gateway needs it: checked fields, the prompt, its length, its blocks.

Parsing is one `json.loads` (orjson when installed) and a handful of type checks, each 400
naming its `param`; everything else is the engine's to validate (the gateway forwards the body
unchanged but for `priority`, `stream_options` and a default `max_tokens`).

Counting uses the engine's tokenizer: locally when the gateway can load the same tokenizer the
engine uses (the simulated engine's deterministic tokenizer, or a model directory's
`tokenizer.json`), else the engine's own `/tokenize`. A prompt far longer than the limit is
counted only up to the limit, as vLLM does, so a 200K-token prompt costs little.

Prefix blocks for the cache-aware index are chained hashes (`inhouse.hashing.chain_hash`, the
one scheme) over blocks of `ROUTER_BLOCK_TOKENS * CHARS_PER_TOKEN` characters of the rendered
prompt, not over token ids: tokenizing 32K characters costs ~18 ms in Python against ~0.13 ms
for hashing 256-character blocks (measured, docs/gateway.md). Like llm-d's approximate index
(blocks clamped to >= 64 tokens), the router's blocks are coarser than the engine's; a match
loses at most one block of precision.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from inhouse.hashing import ROOT_HASH, chain_hash, chain_hashes, hash_token_blocks
from inhouse.openai_errors import ApiError, invalid
from inhouse.tokenizer import (
    CHARS_PER_TOKEN,
    SimpleTokenizer,
    Tokenizer,
    first_media_part,
    render_chat,
)

try:  # orjson parses a 32K-character body ~5x faster than the standard library
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads
    _JSONError = (ValueError,)


ROUTER_BLOCK_TOKENS = 64
MAX_HASHED_BLOCKS = 2048  # 131,072 tokens: llm-d's maxPrefixTokensToMatch
LOCAL_COUNT_INLINE_CHARS = 65536  # longer texts are counted on a worker thread
SESSION_HEADER = "x-session-id"
MAX_NESTING = 255  # orjson writes no deeper (its reader takes 1024)


@dataclass(slots=True)
class ParsedRequest:
    body: dict[str, Any]
    is_chat: bool
    model: str | None
    is_stream: bool
    wants_usage: bool
    max_tokens: int | None
    text: str | None  # the rendered prompt (chat template applied) or the prompt string
    token_ids: list[int] | None  # a completions prompt given as token ids
    session_key: str | None
    num_choices: int = 1  # `n` (or completions' `best_of`): outputs generated, each max_tokens
    # The first chat content part that is not text: (its `param`, its kind), e.g.
    # ("messages.0.content.1.type", "image_url"); counted as no tokens, so a text-only pool
    # refuses it (`Admitter.admit`).
    media_part: tuple[str, str] | None = None
    # The field `max_tokens` came from: chat's `max_completion_tokens` wins when given, as in
    # vLLM, and a refusal names the one the client sent.
    max_tokens_field: str = "max_tokens"


def parse_request(raw: bytes, content_type: str, is_chat: bool) -> ParsedRequest:
    """The body checked and read; raises a 400 `ApiError` naming the field."""
    if content_type.split(";", 1)[0].strip().lower() != "application/json":
        raise ApiError(
            400,
            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
            error_type="Bad Request",
        )
    try:
        body = _loads(raw)
    except _JSONError as exc:
        raise ApiError(
            400,
            f"The request body is not valid JSON: {exc}",
            param="body",
            error_type="Bad Request",
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.", param="body")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("model must be a string", param="model")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise invalid("stream must be a boolean", param="stream")
    wants_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise invalid("stream_options must be an object", param="stream_options")
        wants_usage = read_flag(options.get("include_usage")) is True
    max_tokens_field, max_tokens = _max_tokens(body, is_chat)
    num_choices = max(_count(body, "n"), 1 if is_chat else _count(body, "best_of"))
    user = body.get("user")
    session = user if isinstance(user, str) and user else None
    text: str | None
    ids: list[int] | None = None
    media: tuple[str, str] | None = None
    if is_chat:
        text = _chat_text(body)
        media = first_media_part(body["messages"])
    else:
        text, ids = _completion_prompt(body.get("prompt"))
    return ParsedRequest(
        body, is_chat, model, bool(stream), wants_usage, max_tokens, text, ids, session,
        num_choices, media, max_tokens_field,
    )  # fmt: skip


_TRUE_WORDS = frozenset(("1", "on", "t", "true", "y", "yes"))
_FALSE_WORDS = frozenset(("0", "off", "f", "false", "n", "no"))


def read_flag(value: object) -> bool | None:
    """A boolean field as vLLM's request model (pydantic, lax) reads it: null is false, 0/1
    and words such as "yes" are booleans; None for a value it refuses (the engine's 400)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.lower()
        if word in _TRUE_WORDS or word in _FALSE_WORDS:
            return word in _TRUE_WORDS
    return None


def _count(body: dict[str, Any], name: str) -> int:
    """`n` or `best_of`: a positive integer, 1 when absent."""
    value = body.get(name)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{name} must be an integer", param=name)
    if value < 1:
        raise invalid(f"{name} must be at least 1, got {value}", param=name)
    return value


def _max_tokens(body: dict[str, Any], is_chat: bool) -> tuple[str, int | None]:
    """The output limit and the field it came from (`max_tokens` when none is given)."""
    names = ("max_completion_tokens", "max_tokens") if is_chat else ("max_tokens",)
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"{name} must be an integer", param=name)
        if value < 1:
            raise invalid(f"{name} must be at least 1, got {value}", param=name)
        return name, value
    return "max_tokens", None


def _chat_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages must be a non-empty list of messages", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid("each message must be an object", param=f"messages.{i}")
        role = message.get("role")
        if not isinstance(role, str):
            raise invalid("each message needs a string role", param=f"messages.{i}.role")
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise invalid(
                "content must be a string or a list of parts", param=f"messages.{i}.content"
            )
    generation = body.get("add_generation_prompt", True)
    # An assistant turn's tool calls are prompt text too (their arguments, mostly): the
    # template renders them after the turn's content, whether that is a string or parts.
    return _tools_text(body) + render_chat(messages, generation is not False)


def _tools_text(body: dict[str, Any]) -> str:
    """The tool (or legacy function) definitions as the prompt carries them: a chat template
    renders them into the prompt (most at its start, in the system turn), so they count as
    prompt tokens, for the long-prompt gate and the reservation alike."""
    text = ""
    for name in ("tools", "functions"):
        tools = body.get(name)
        if tools is None:
            continue
        if not isinstance(tools, list):
            raise invalid(f"{name} must be a list", param=name)
        if tools:
            text += f"<|im_start|>{name}\n{_json_text(tools)}<|im_end|>\n"
    return text


def _json_text(value: object) -> str:
    """JSON as the engine renders it into the prompt (`json.dumps`, ", " and ": " between
    items): compact JSON is up to a third shorter, and counted so it let a tenant spend past
    its budget and a long prompt past the gate."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        raise nested_too_deep() from None


def nested_too_deep() -> ApiError:
    """A body the gateway parsed but cannot write back: nested past `MAX_NESTING` levels."""
    return ApiError(
        400,
        f"The request body is nested more than {MAX_NESTING} levels deep, more than this "
        "gateway forwards; send flatter JSON.",
        param="body",
        error_type="Bad Request",
    )


def _completion_prompt(prompt: object) -> tuple[str | None, list[int] | None]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise invalid("prompt must not be empty", param="prompt")
        return prompt, None
    if isinstance(prompt, list) and prompt:
        ids: list[int] = [t for t in prompt if isinstance(t, int) and not isinstance(t, bool)]
        if len(ids) == len(prompt) and min(ids) >= 0:
            return None, ids
    raise invalid(
        "prompt must be a non-empty string or list of token ids (one prompt)", param="prompt"
    )


# -- counting ---------------------------------------------------------------------------------


class TokenCounter(Protocol):
    async def count(self, request: ParsedRequest, model: str, limit: int) -> int:
        """Prompt tokens, exact up to `limit`; any value above `limit` means "longer"."""
        ...


class LocalCounter:
    """The engine's tokenizer, loaded in the gateway.

    NOTE: the simulated engine's tokenizer cuts text into 4-character pieces, so its count is
    `ceil(len(text) / 4)` without building the ids (tests check it against `encode`)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._is_simple = isinstance(tokenizer, SimpleTokenizer)

    async def count(self, request: ParsedRequest, model: str, limit: int) -> int:
        if request.token_ids is not None:
            return len(request.token_ids)
        text = request.text or ""
        if self._is_simple:
            return -(-len(text) // CHARS_PER_TOKEN)
        # A real tokenizer: never more than ~16 characters a token on text, so a prefix of
        # 16 * (limit + 1) characters holds more than `limit` tokens if the text does.
        text = text[: 16 * (limit + 1)]
        if len(text) <= LOCAL_COUNT_INLINE_CHARS:
            return len(self.tokenizer.encode(text))
        return len(await asyncio.to_thread(self.tokenizer.encode, text))


class RemoteCounter:
    """The engine's `/tokenize` (one extra call per request), for engines whose tokenizer the
    gateway cannot load. `post(path, json)` posts to a healthy replica of the pool."""

    def __init__(self, post: Callable[[str, dict[str, Any]], Any]) -> None:
        self._post = post

    async def count(self, request: ParsedRequest, model: str, limit: int) -> int:
        if request.token_ids is not None:
            return len(request.token_ids)
        if request.is_chat and len(request.text or "") <= 16 * (limit + 1):
            payload: dict[str, Any] = {"model": model, "messages": request.body["messages"]}
            if request.body.get("tools"):
                payload["tools"] = request.body["tools"]  # vLLM's /tokenize renders them too
        else:
            payload = {"model": model, "prompt": (request.text or "")[: 16 * (limit + 1)]}
        try:
            answer = await self._post("/tokenize", payload)
        except ApiError as error:
            if "messages" in payload:
                raise chat_refusal(error) from None
            raise
        count = answer.get("count") if isinstance(answer, dict) else None
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ApiError(
                502,
                "The engine's /tokenize answered without a token count.",
                reason="upstream_error",
                retry_after_s=1.0,
            )
        return count


_ERROR_LINE = re.compile(r"  \{.*'loc': '([^']*)'")
_ERROR_COUNT = re.compile(r"(\d+) validation errors?:\n")


def chat_refusal(error: ApiError) -> ApiError:
    """A chat request's `/tokenize` refusal as the client's error. vLLM's `/tokenize` body is
    a prompt request or a chat request, so its validation error lists the prompt shape's
    errors first (`body.prompt` missing, `param: "body.prompt"`): a field the client never
    sent. Those go; the chat shape's stay, counted again, the first of them the `param`, as
    vLLM's chat route words the same refusal. NOTE: a refusal in other words that names
    `body.prompt` is relayed as it came but for its `param`, `messages`."""
    if error.status >= 500 or error.param is None or not _is_prompt_loc(error.param):
        return error
    head = _ERROR_COUNT.match(error.message)
    lines = error.message.split("\n")[1:]
    more = lines[-1:] if lines and lines[-1].startswith("  ...and ") else []
    matches = [_ERROR_LINE.match(line) for line in lines[: len(lines) - len(more)]]
    kept = [(m.string, m[1]) for m in matches if m is not None and not _is_prompt_loc(m[1])]
    param, message = "messages", error.message
    if head is not None and kept and None not in matches:
        count = int(head[1]) - (len(matches) - len(kept))
        words = f"{count} validation {'error' if count == 1 else 'errors'}:"
        param, message = kept[0][1], "\n".join([words, *(line for line, _ in kept), *more])
    return ApiError(error.status, message, param, error.reason, error.retry_after_s,
                    error.error_type)  # fmt: skip


def _is_prompt_loc(loc: str) -> bool:
    return loc == "body.prompt" or loc.startswith("body.prompt.")


# -- prefix blocks ----------------------------------------------------------------------------


def model_root(model: str) -> int:
    """The chain's root for a model name, so that two adapters' prefixes never match."""
    return chain_hash(ROOT_HASH, model)


def prompt_blocks(request: ParsedRequest, root: int, block_tokens: int) -> list[int]:
    """Chained hashes of the prompt's full router blocks (at most `MAX_HASHED_BLOCKS`)."""
    if request.token_ids is not None:
        ids = request.token_ids[: block_tokens * MAX_HASHED_BLOCKS]
        return hash_token_blocks(ids, block_tokens, parent=root)
    text = request.text or ""
    size = block_tokens * CHARS_PER_TOKEN
    end = min(len(text), size * MAX_HASHED_BLOCKS) - size + 1
    return chain_hashes(root, [text[start : start + size] for start in range(0, end, size)])
