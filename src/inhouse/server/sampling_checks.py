"""vLLM's `SamplingParams` checks of a read request, in vLLM's order and words: the ones that
matter for the simulated engine (`check_sampling`) and the out-of-vocabulary ones vLLM makes
once a stream has started (`check_token_ids`).
"""

from __future__ import annotations

import math

from inhouse.openai_errors import ApiError, invalid
from inhouse.server.request_models import (
    ChatCompletionRequest,
    CompletionRequest,
    _SamplingRequest,
    stop_list,
)

# vLLM's `max_logprobs` default.
MAX_LOGPROBS = 20


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
