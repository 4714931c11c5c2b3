"""SGLang's admission: KV reserved for the tokens running requests will still generate.

vLLM admits a request when its prompt fits and allocates decode slots as they come, preempting
when they run out. SGLang instead admits a request only if the free KV covers its prompt and
its own future tokens (clipped), after setting aside a share `new_token_ratio` of the future
tokens of every running request. The share starts at 0.7, decays by a fixed step per decode
step towards 0.098 (0.7 x 0.14, over 600 steps), and when decode does run out of KV and a
request is retracted, it is reset to the share the batch has actually needed so far. These
are SGLang's defaults (`SGLANG_INIT_NEW_TOKEN_RATIO`, `..._MIN_NEW_TOKEN_RATIO_FACTOR`,
`..._NEW_TOKEN_RATIO_DECAY_STEPS`, `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION`, and the 20
`RETRACT_DECODE_STEPS` it allows for after a retraction), facts of the engine, not fitted.
"""

from __future__ import annotations

from collections.abc import Iterable

from inhouse.engine.request import Request

INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
DECAY_STEPS = 600
CLIP_MAX_NEW_TOKENS = 4096
RETRACT_DECODE_STEPS = 20


def future_tokens(request: Request) -> int:
    """Tokens a request may still generate, clipped as SGLang's estimate is."""
    return min(request.output_len - request.num_output_tokens, CLIP_MAX_NEW_TOKENS)


class TokenReservation:
    """The share of running requests' future tokens held back from admission."""

    def __init__(self) -> None:
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self._decay = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / DECAY_STEPS

    def remaining(self, running: Iterable[Request], free_tokens: int) -> float:
        """KV tokens free for new requests once running requests' futures are set aside."""
        held = sum(future_tokens(r) for r in running) * self.new_token_ratio
        return free_tokens - held

    def held_after(self, running: list[Request], num_steps: int) -> float:
        """A lower bound of the tokens held back after `num_steps` more decode steps."""
        ratio = max(self.new_token_ratio - num_steps * self._decay, MIN_NEW_TOKEN_RATIO)
        future = sum(max(future_tokens(r) - num_steps, 0) for r in running)
        return future * ratio

    @staticmethod
    def cost(request: Request, uncached_tokens: int) -> int:
        """What admitting a request takes: its uncached prompt and all its (clipped) future."""
        return uncached_tokens + future_tokens(request)

    def on_decode_steps(self, num_steps: int) -> None:
        self.new_token_ratio = max(
            self.new_token_ratio - num_steps * self._decay, MIN_NEW_TOKEN_RATIO
        )

    def on_retract(self, running: Iterable[Request]) -> None:
        """After decode ran out of KV: the share the batch has needed, plus a margin."""
        batch = list(running)
        decoded = sum(r.num_output_tokens for r in batch)
        planned = sum(r.output_len for r in batch)
        if planned:
            needed = (decoded + RETRACT_DECODE_STEPS * len(batch)) / planned
            self.new_token_ratio = min(1.0, needed)
