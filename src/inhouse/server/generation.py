"""What a request will generate, decided when it arrives: length, text and finish reason.

The simulated engine's output is deterministic: a request's text is a run of the tokenizer's
output pieces starting at an offset taken from the prompt, so the same request always gets the
same answer. Its length is `max_tokens` unless

* an EOS length distribution is configured (`EosLengths`) and `ignore_eos` is off: a length is
  drawn, seeded by the prompt, and the request stops with `finish_reason: "stop"`;
* a `stop` string occurs in the text after `min_tokens` tokens: the request stops on the token
  that completes it, the text is cut before it, and `stop_reason` names it (vLLM's default,
  `include_stop_str_in_output: false`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from inhouse.errors import SpecError
from inhouse.tokenizer import Tokenizer


@dataclass(frozen=True, slots=True)
class EosLengths:
    """A distribution of output lengths at which the model would emit EOS.

    `kind` is `exp` (mean `a`), `uniform` (`a` to `b` inclusive) or `lognormal` (median `a`,
    sigma `b`). Parsed from `--eos-length-dist exp:200`, `uniform:50:400`, `lognormal:150:0.8`.
    """

    kind: str
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> int:
        if self.kind == "exp":
            return max(1, math.ceil(rng.expovariate(1.0 / self.a)))
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        return max(1, round(rng.lognormvariate(math.log(self.a), self.b)))


def parse_eos_lengths(text: str | None) -> EosLengths | None:
    if not text or text == "none":
        return None
    kind, _, rest = text.partition(":")
    try:
        values = [float(v) for v in rest.split(":")] if rest else []
    except ValueError:
        values = []
    arity = {"exp": 1, "uniform": 2, "lognormal": 2}
    if kind not in arity or len(values) != arity[kind] or min(values) <= 0:
        raise SpecError(
            f"--eos-length-dist {text!r}: use none, exp:MEAN, uniform:LO:HI or "
            "lognormal:MEDIAN:SIGMA with positive numbers"
        )
    if kind == "uniform" and values[0] > values[1]:
        raise SpecError(f"--eos-length-dist {text!r}: LO must not exceed HI")
    return EosLengths(kind, values[0], values[1] if len(values) > 1 else 0.0)


@dataclass(frozen=True, slots=True)
class GenerationPlan:
    """`output_len` tokens; `cut_chars` caps the visible text (a stop string), or None;
    `forced` the (id, text) of each token when the output is fixed (a tool call's JSON)."""

    output_len: int
    finish_reason: str  # "length" | "stop"
    stop_reason: str | None
    seed: int
    cut_chars: int | None = None
    forced: tuple[tuple[int, str], ...] | None = None

    def piece(self, tokenizer: Tokenizer, index: int) -> tuple[int, str]:
        if self.forced is not None:
            return self.forced[index]
        return tokenizer.output_piece(self.seed, index)


def plan_forced(tokenizer: Tokenizer, seed: int, text: str, max_tokens: int) -> GenerationPlan:
    """An output fixed in advance (structured output: a tool call), cut at `max_tokens`. Each
    token's text is what decoding it after the ones before adds, so the pieces join to `text`
    under any tokenizer."""
    ids = tokenizer.encode(text)
    pieces = []
    before = ""
    for end in range(1, len(ids) + 1):
        decoded = tokenizer.decode(ids[:end])
        pieces.append((ids[end - 1], decoded[len(before) :]))
        before = decoded
    kept = tuple(pieces[:max_tokens])
    reason = "stop" if len(kept) == len(pieces) else "length"
    return GenerationPlan(len(kept), reason, None, seed, forced=kept)


def plan_generation(
    tokenizer: Tokenizer,
    seed: int,
    max_tokens: int,
    min_tokens: int,
    ignore_eos: bool,
    stop: list[str],
    eos: EosLengths | None,
    server_seed: int = 0,
) -> GenerationPlan:
    output_len, reason = max_tokens, "length"
    if eos is not None and not ignore_eos:
        drawn = max(eos.sample(random.Random(seed * 1_000_003 + server_seed)), min_tokens, 1)
        if drawn < max_tokens:
            output_len, reason = drawn, "stop"
    if stop:
        found = _find_stop(tokenizer, seed, output_len, min_tokens, stop)
        if found is not None:
            num_tokens, cut, which = found
            return GenerationPlan(num_tokens, "stop", which, seed, cut)
    return GenerationPlan(output_len, reason, None, seed)


def _find_stop(
    tokenizer: Tokenizer, seed: int, output_len: int, min_tokens: int, stop: list[str]
) -> tuple[int, int, str] | None:
    """Earliest stop string completed by a token after the first `min_tokens`: (tokens
    generated, characters kept, the string). As vLLM, only occurrences that end in the newly
    added characters count."""
    text = ""
    for index in range(output_len):
        before = len(text)
        text += tokenizer.output_piece(seed, index)[1]
        if index + 1 <= min_tokens:
            continue
        best: tuple[int, str] | None = None
        for candidate in stop:
            at = text.find(candidate, max(0, before - len(candidate) + 1))
            if at >= 0 and (best is None or at < best[0]):
                best = (at, candidate)
        if best is not None:
            return index + 1, best[0], best[1]
    return None


def output_text(
    tokenizer: Tokenizer, plan: GenerationPlan, start: int, end: int, chars_before: int
) -> tuple[str, int]:
    """Text of output tokens `start..end` as the client sees it (cut at a stop string), given
    the raw length of the tokens before `start`; returns it with the new raw length."""
    raw = "".join(plan.piece(tokenizer, i)[1] for i in range(start, end))
    total = chars_before + len(raw)
    if plan.cut_chars is not None:
        raw = raw[: max(0, plan.cut_chars - chars_before)]
    return raw, total


def output_token_ids(tokenizer: Tokenizer, plan: GenerationPlan, num_tokens: int) -> list[int]:
    return [plan.piece(tokenizer, i)[0] for i in range(num_tokens)]
