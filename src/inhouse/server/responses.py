"""vLLM's OpenAI-compatible response shapes, as vLLM 0.32 sends them
(shared/reference/vllm-captures/gen.txt): field names, their order and their nulls; and the SSE
framing of a streamed one (the chunks are `streaming`'s).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

VLLM_API_VERSION = "0.32.0"
VERSION = f"{VLLM_API_VERSION}+inhouse"
SYSTEM_FINGERPRINT = f"vllm-{VLLM_API_VERSION}-inhouse"


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
