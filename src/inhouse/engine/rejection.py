"""Why the engine core refuses a request at arrival: what, with the numbers, and no words.

The core decides; the serving layer words it (`inhouse.openai_errors.rejection_message`), as
vLLM's engine raises a typed error and its API server writes the message.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RejectionKind(enum.Enum):
    PROMPT_OVER_CONTEXT = "prompt_over_context"  # the prompt alone exceeds max_model_len
    REQUEST_OVER_CONTEXT = "request_over_context"  # prompt + output exceeds max_model_len
    OVER_KV_CACHE = "over_kv_cache"  # prompt + output exceeds the whole KV cache


@dataclass(frozen=True, slots=True)
class Rejection:
    """A refused request: `limit` is max_model_len, or the KV cache's tokens for
    `OVER_KV_CACHE`."""

    kind: RejectionKind
    num_prompt_tokens: int
    num_output_tokens: int
    limit: int
