"""The simulated engine's HTTP face: vLLM's OpenAI-compatible routes over an `EngineState`.

Routes: /v1/completions, /v1/chat/completions, /v1/models, /tokenize, /detokenize, /health,
/ping, /version, /load, /metrics. Response shapes, SSE framing and errors follow
`inhouse.server.protocol`. No fault can be switched from this port (see `admin_app`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from inhouse.openai_errors import ENGINE_DEAD_MESSAGE, ApiError, invalid, text_only_message
from inhouse.server.chat_messages import ChatMessage, read_message
from inhouse.server.generation import output_text
from inhouse.server.http_metrics import HttpMetricsMiddleware
from inhouse.server.metrics import CONTENT_TYPE
from inhouse.server.request_models import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    TokenizeShapes,
    stop_list,
)
from inhouse.server.responses import DONE, VERSION, chat_body, completion_body
from inhouse.server.runner import Stream
from inhouse.server.sampling_checks import check_sampling, check_token_ids
from inhouse.server.state import EngineState
from inhouse.server.streaming import stream_chat, stream_completion, usage_of
from inhouse.server.tools import ToolCall, plan_tool_call, structured_text, tools_prompt
from inhouse.server.tools import message as tool_message
from inhouse.server.validation import BodyParseError, parse_body
from inhouse.tokenizer import first_media_part, render_chat, seed_of

Handler = Callable[[Request], Awaitable[Response]]


def json_response(body: dict[str, Any], status: int = 200) -> Response:
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return Response(text, status_code=status, media_type="application/json")


def _api(handler: Callable[[EngineState, Request], Awaitable[Response]]) -> Handler:
    async def endpoint(request: Request) -> Response:
        state: EngineState = request.app.state.engine
        try:
            return await handler(state, request)
        except UnicodeEncodeError as bad_text:  # a "\ud800" escape: valid JSON, not valid text
            error = ApiError(
                400,
                f"The request's text is not valid Unicode ({bad_text}); send UTF-8 text without "
                "lone surrogate escapes such as \\ud800.",
            )
        except ApiError as refused:
            error = refused
        except BodyParseError as unreadable:  # FastAPI's own 400, as vLLM sends it
            return JSONResponse({"detail": str(unreadable)}, status_code=400)
        return Response(error.body(), status_code=error.status, media_type="application/json")

    return endpoint


# -- generation ---------------------------------------------------------------------------


async def completions(state: EngineState, request: Request) -> Response:
    arrival_s = state.runner.clock()
    state.check_accepting()
    body = parse_body(
        await request.body(), request.headers.get("content-type", ""), CompletionRequest
    )
    model = state.resolve_model(body.model)
    prompt = body.prompt
    if isinstance(prompt, list) and not prompt:
        raise ApiError(400, "You must pass at least one prompt")  # vLLM's words
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
        if len(prompt) != 1:
            raise invalid(
                "Batched prompts are not supported by the simulated engine; send "
                "one prompt per request.",
                param="prompt",
            )
        prompt = prompt[0]
    if isinstance(prompt, list) and not prompt:  # `[[]]`: vLLM's words
        raise ApiError(400, "The decoder prompt cannot be empty")
    is_text = isinstance(prompt, str)
    state.check_max_tokens(body.max_tokens)
    tokenizer = state.tokenizer
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    else:
        ids = _token_ids(prompt, tokenizer.vocab_size)
    check_sampling(body, body.max_tokens, tokenizer.vocab_size)
    if body.stream and (refused := _token_ids_refusal(body, tokenizer.vocab_size)):
        return refused
    check_token_ids(body, tokenizer.vocab_size)
    stream = state.admit(
        ids,
        is_text,
        body.max_tokens,
        body.min_tokens,
        body.ignore_eos,
        stop_list(body.stop),
        body.priority,
        model,
        "cmpl",
        arrival_s,
        forced_text=structured_text(body.response_format_dict(), seed_of(ids)),
    )
    options = body.stream_options
    if body.stream:
        include = bool(options and options.include_usage)
        continuous = bool(options and options.continuous_usage_stats)
        return _streaming(
            stream_completion(state, stream, model, include, continuous), stream, state
        )
    return await _complete(state, request, stream, model, chat=False)


def _token_ids_refusal(
    body: CompletionRequest | ChatCompletionRequest, vocab_size: int
) -> Response | None:
    """vLLM checks stop_token_ids and logit_bias against the vocabulary once a streamed
    response has begun: the refusal comes as a 200 stream of one error event, then [DONE]
    (odd, matched)."""
    try:
        check_token_ids(body, vocab_size)
    except ApiError as refused:
        error = json.loads(refused.body())  # re-spaced as vLLM's stream error events are
        event = b"data: " + json.dumps(error).encode() + b"\n\n" + DONE
        return Response(event, media_type="text/event-stream; charset=utf-8")
    return None


EMPTY_CONVERSATION = (
    "Cannot apply chat template to an empty conversation. Provide at least one message."
)
FINAL_MESSAGE_AND_GENERATION_PROMPT = (
    "continue_final_message and add_generation_prompt are not compatible. Use "
    "continue_final_message when you want the model to continue the final message, and "
    "add_generation_prompt when you want to add a header that will prompt it to start a new "
    "assistant message instead."
)


def rendered_messages(model: str, messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The messages read as vLLM's renderer reads them, one after the other: the parts of each
    (vLLM's plain 400 for one that fits no part type), then its media. The simulated engine
    serves a text-only model and refuses an image, audio, video or file part as vLLM refuses
    one (400, its message, no `param`), never counting it as nothing. The gateway names the
    part; this is vLLM's answer, for fidelity."""
    dicts = []
    for message in messages:
        dicts.append(read_message(message))
        if first_media_part(dicts[-1:]) is not None:
            raise ApiError(400, text_only_message(model))
    return dicts


async def chat_completions(state: EngineState, request: Request) -> Response:
    arrival_s = state.runner.clock()
    state.check_accepting()
    body = parse_body(
        await request.body(), request.headers.get("content-type", ""), ChatCompletionRequest
    )
    model = state.resolve_model(body.model)
    # `max_completion_tokens` wins when given, 0 included (and the errors name it).
    max_tokens = body.max_tokens
    max_tokens_param = "max_tokens"
    if body.max_completion_tokens is not None:
        max_tokens, max_tokens_param = body.max_completion_tokens, "max_completion_tokens"
    state.check_max_tokens(max_tokens, max_tokens_param)
    extra = dict(body.model_extra or {})
    if body.tools is not None:  # as sent: the prompt renders the client's own JSON
        extra["tools"] = [tool.model_dump(exclude_unset=True) for tool in body.tools]
    if not body.messages:
        raise ApiError(400, EMPTY_CONVERSATION)
    messages = rendered_messages(model, body.messages)
    if body.continue_final_message and body.add_generation_prompt:
        raise ApiError(400, FINAL_MESSAGE_AND_GENERATION_PROMPT)
    text = tools_prompt(extra) + render_chat(messages, body.add_generation_prompt)
    ids = state.tokenizer.encode(text)
    vocab_size = state.tokenizer.vocab_size
    check_sampling(body, max_tokens, vocab_size)
    if body.stream and (refused := _token_ids_refusal(body, vocab_size)):
        return refused
    check_token_ids(body, vocab_size)
    seed = seed_of(ids)
    call = plan_tool_call(extra, state.options.tools, seed)
    stream = state.admit(
        ids,
        True,
        max_tokens,
        body.min_tokens,
        body.ignore_eos,
        stop_list(body.stop),
        body.priority,
        model,
        "chatcmpl",
        arrival_s,
        forced_text=call.raw_text if call else structured_text(body.response_format_dict(), seed),
    )
    options = body.stream_options
    if body.stream:
        include = bool(options and options.include_usage)
        continuous = bool(options and options.continuous_usage_stats)
        chunks = stream_chat(state, stream, model, include, continuous, call)
        return _streaming(chunks, stream, state)
    return await _complete(state, request, stream, model, chat=True, call=call)


def _token_ids(prompt: object, vocab_size: int) -> list[int]:
    """Token ids from a request, refused (as vLLM refuses a prompt: no `param`) when one is
    not in the vocabulary: a tokenizer would decode it to nonsense or fail on it."""
    if not isinstance(prompt, list):
        return []
    ids = [int(t) for t in prompt]
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ApiError(400, f"Token id {bad} is out of vocabulary")
    return ids


async def _complete(
    state: EngineState,
    request: Request,
    stream: Stream,
    model: str,
    chat: bool,
    call: ToolCall | None = None,
) -> Response:
    """Wait for the whole answer; abort the request if the client goes away first."""
    disconnect = asyncio.ensure_future(_wait_disconnect(request))
    try:
        while not stream.finished:
            waiter = asyncio.ensure_future(stream.event.wait())
            done, _ = await asyncio.wait({waiter, disconnect}, return_when=asyncio.FIRST_COMPLETED)
            if disconnect in done:
                waiter.cancel()
                state.runner.abort(stream)
                return Response(status_code=499)
            stream.event.clear()
    finally:
        disconnect.cancel()
    if stream.finish_reason == "error":
        error = ApiError(500, ENGINE_DEAD_MESSAGE)
        return Response(error.body(), status_code=error.status, media_type="application/json")
    text, _ = output_text(state.tokenizer, stream.plan, 0, stream.num_tokens, 0)
    reason = stream.finish_reason or "length"
    stop_reason = stream.plan.stop_reason if reason == "stop" else None
    build = chat_body if chat else completion_body
    created = int(time.time())
    body = build(
        stream.request_id, created, model, text, reason, stop_reason, usage_of(state, stream)
    )
    if call is not None:
        (choice,) = body["choices"]
        choice["message"] = tool_message(call, text)
        choice["finish_reason"] = call.finish_reason if reason == "stop" else reason
    return json_response(body)


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _streaming(chunks: AsyncIterator[bytes], stream: Stream, state: EngineState) -> Response:
    async def guarded() -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            # The client went away (the generator was closed) before the end: abort.
            state.runner.abort(stream)

    return StreamingResponse(guarded(), media_type="text/event-stream; charset=utf-8")


# -- models, tokenizer, health, metrics ---------------------------------------------------


async def models(state: EngineState, request: Request) -> Response:
    created = int(time.time())
    permission = {
        "id": "",
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }

    def card(name: str, root: str, parent: str | None, max_len: int | None) -> dict[str, Any]:
        perm = dict(permission, id=f"modelperm-{abs(hash((name, created))) % 16**16:016x}")
        return {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": root,
            "parent": parent,
            "max_model_len": max_len,
            "permission": [perm],
        }

    data = [card(n, state.model_root(), None, state.max_model_len) for n in state.served_names]
    data += [card(lora.name, lora.path, state.model_name, None) for lora in state.loras]
    return json_response({"object": "list", "data": data})


async def tokenize(state: EngineState, request: Request) -> Response:
    raw, content_type = await request.body(), request.headers.get("content-type", "")
    parse_body(raw, content_type, TokenizeShapes)  # vLLM's errors for a body of neither shape
    body = parse_body(raw, content_type, TokenizeRequest)
    state.resolve_model(body.model)
    if body.messages is not None:
        if not body.messages:
            raise ApiError(400, EMPTY_CONVERSATION)
        # The tools too, as the chat renders them (vLLM's /tokenize does): a gateway counts
        # prompts here, for its long-prompt gate and token limits.
        messages = rendered_messages(state.model_name, body.messages)
        text = tools_prompt(dict(body.model_extra or {})) + render_chat(
            messages, body.add_generation_prompt
        )
    else:
        text = body.prompt or ""
    ids = state.tokenizer.encode(text)
    strs = state.tokenizer.token_strs(ids) if body.return_token_strs else None
    return json_response(
        {"count": len(ids), "max_model_len": state.max_model_len, "tokens": ids, "token_strs": strs}
    )


async def detokenize(state: EngineState, request: Request) -> Response:
    body = parse_body(
        await request.body(), request.headers.get("content-type", ""), DetokenizeRequest
    )
    state.resolve_model(body.model)
    # vLLM skips an id outside the vocabulary (odd, matched); a negative one is a 400.
    ids = [t for t in body.tokens if t < state.tokenizer.vocab_size]
    return json_response({"prompt": state.tokenizer.decode(ids)})


async def health(state: EngineState, request: Request) -> Response:
    # NOTE: unlike vLLM (200 until the port closes), 503 while draining, so routers and
    # readiness probes stop sending work here at once.
    ok = state.is_loaded and not state.is_draining and not state.runner.is_dead
    return Response(status_code=200 if ok else 503)


async def version(state: EngineState, request: Request) -> Response:
    return json_response({"version": VERSION})


async def load(state: EngineState, request: Request) -> Response:
    return json_response({"server_load": state.runner.num_in_flight})


async def metrics(state: EngineState, request: Request) -> Response:
    body = state.metrics.render(state.runner.snapshot())
    return Response(body, media_type=CONTENT_TYPE)


async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    detail = exc.detail if isinstance(exc, HTTPException) else "Not Found"
    return JSONResponse({"detail": detail}, status_code=status)


class HangMiddleware:
    """The admin port's `hang` with scope `all`: every request waits until it is cleared."""

    def __init__(self, app: ASGIApp, state: EngineState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.state.faults.hang_all.wait()
        await self.app(scope, receive, send)


def create_engine_app(state: EngineState) -> Starlette:
    routes = [
        Route("/v1/completions", _api(completions), methods=["POST"]),
        Route("/v1/chat/completions", _api(chat_completions), methods=["POST"]),
        Route("/v1/models", _api(models), methods=["GET"]),
        Route("/tokenize", _api(tokenize), methods=["POST"]),
        Route("/detokenize", _api(detokenize), methods=["POST"]),
        Route("/health", _api(health), methods=["GET"]),
        Route("/ping", _api(health), methods=["GET", "POST"]),
        Route("/version", _api(version), methods=["GET"]),
        Route("/load", _api(load), methods=["GET"]),
        Route("/metrics", _api(metrics), methods=["GET"]),
    ]
    for route in routes:  # FastAPI (vLLM) adds no HEAD to a GET route: a 405, as there
        if route.methods is not None:
            route.methods.discard("HEAD")
    app = Starlette(routes=routes, exception_handlers={HTTPException: _not_found})
    app.state.engine = state
    app.add_middleware(HttpMetricsMiddleware, registry=state.metrics.registry)
    app.add_middleware(HangMiddleware, state=state)
    return app
