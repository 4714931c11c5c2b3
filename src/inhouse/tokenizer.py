"""Tokenizers for the simulated engine: a deterministic prefix-stable one, or the model's own.

`SimpleTokenizer` cuts text into 4-character pieces from its start, so two texts that share a
prefix share their leading tokens (what prefix caching needs across HTTP requests) and a token
stands for about 4 characters, as for English under a real BPE. A piece's id is a CRC of its
UTF-8 bytes folded into the vocabulary, so ids are the same in every process. `decode` is exact
for pieces this tokenizer has seen (a bounded table remembers them) and for the output pieces it
generates; an id it never saw decodes to a stable placeholder piece.

`HFTokenizer` wraps a model directory's `tokenizer.json` through the `tokenizers` package, when
both exist. Either one renders chat messages with a small ChatML-style template (the model's
Jinja chat template is not interpreted) and produces output text deterministically.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

CHARS_PER_TOKEN = 4
# Pieces the output text is made of: 4 characters each, so a re-sent answer tokenizes alike.
OUTPUT_TEXT = (
    "The quick brown fox jumps over the lazy dog near the river bank while the sun sets "
    "slowly behind the hills and the evening air turns cool and calm for all of them now. "
)
_OUTPUT_PIECES = tuple(
    OUTPUT_TEXT[i : i + CHARS_PER_TOKEN] for i in range(0, len(OUTPUT_TEXT), CHARS_PER_TOKEN)
)
# Ids below this are reserved (special tokens), as real vocabularies start with them.
NUM_RESERVED_IDS = 256
EOS_TOKEN_ID = 2
MAX_REMEMBERED_PIECES = 1 << 20


class Tokenizer(Protocol):
    """What the engine server needs from a tokenizer."""

    vocab_size: int  # valid token ids are 0 .. vocab_size - 1

    @property
    def eos_token_id(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def token_strs(self, token_ids: Sequence[int]) -> list[str]:
        """Each id's token as the vocabulary spells it (vLLM's /tokenize `token_strs`)."""
        ...

    def output_piece(self, seed: int, index: int) -> tuple[int, str]:
        """The `index`-th generated token (id and text) of a request whose content hashes to
        `seed`: the same request always generates the same text."""
        ...


def render_chat(messages: Sequence[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """ChatML-style rendering; a message's rendering does not depend on later messages, so
    a conversation's history keeps its tokens (and its cached KV) from turn to turn."""
    parts: list[str] = []
    for message in messages:
        parts.append(f"<|im_start|>{message.get('role', 'user')}\n")
        calls = message.get("tool_calls")  # an assistant turn that called tools
        called = json.dumps(calls, ensure_ascii=False, sort_keys=True) if calls else ""
        parts.append(f"{content_text(message.get('content'))}{called}<|im_end|>\n")
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def content_text(content: object) -> str:
    """A message's text: a string, or the text parts of an OpenAI content-part list (an
    assistant turn's `refusal` part is text too, as vLLM renders it)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
        return "".join(texts)
    return str(content)


# Parts whose words are counted: their `text`, or a refusal part's `refusal` (vLLM renders it).
TEXT_PART_TYPES = ("text", "input_text", "output_text", "refusal")


def first_media_part(messages: Sequence[object]) -> tuple[str, str] | None:
    """The first content part that is not text, as (`param`, kind). A part without `type` is
    of the kind its key names, as vLLM reads it (`{"image_url": ...}` is an image); a part that
    is not an object, or whose `type` is not a string, is the engine's to refuse."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not part:
                continue
            kind = part.get("type")
            if isinstance(kind, str) and kind not in TEXT_PART_TYPES:
                return f"messages.{i}.content.{j}.type", kind
            if kind is None and "text" not in part:
                return f"messages.{i}.content.{j}", next(iter(part))
    return None


def seed_of(token_ids: Sequence[int]) -> int:
    """A stable 32-bit digest of a prompt, choosing where its output text starts."""
    data = b"".join(t.to_bytes(4, "little", signed=False) for t in token_ids[:4096])
    return zlib.crc32(data) ^ len(token_ids)


class SimpleTokenizer:
    def __init__(self, vocab_size: int = 128_256) -> None:
        assert vocab_size > NUM_RESERVED_IDS, "vocabulary too small"
        self.vocab_size = vocab_size
        self._span = vocab_size - NUM_RESERVED_IDS
        self._pieces: dict[int, str] = {}
        self._output = [(self._piece_id(p), p) for p in _OUTPUT_PIECES]
        for token_id, piece in self._output:
            self._pieces[token_id] = piece
        self._num_fixed = len(self._pieces)

    @property
    def eos_token_id(self) -> int:
        return EOS_TOKEN_ID

    def _piece_id(self, piece: str) -> int:
        return NUM_RESERVED_IDS + zlib.crc32(piece.encode("utf-8")) % self._span

    def encode(self, text: str) -> list[int]:
        pieces = self._pieces
        if len(pieces) > MAX_REMEMBERED_PIECES:
            # Forget what prompts taught us; keep the output pieces.
            self._pieces = pieces = {i: p for i, p in self._output}
        ids: list[int] = []
        crc = zlib.crc32
        base, span = NUM_RESERVED_IDS, self._span
        for start in range(0, len(text), CHARS_PER_TOKEN):
            piece = text[start : start + CHARS_PER_TOKEN]
            token_id = base + crc(piece.encode("utf-8")) % span
            pieces.setdefault(token_id, piece)
            ids.append(token_id)
        return ids

    def decode(self, token_ids: Sequence[int]) -> str:
        pieces = self._pieces
        out = []
        for token_id in token_ids:
            piece = pieces.get(token_id)
            if piece is None:
                piece = (
                    ""
                    if token_id < NUM_RESERVED_IDS
                    else _OUTPUT_PIECES[token_id % len(_OUTPUT_PIECES)]
                )
            out.append(piece)
        return "".join(out)

    def token_strs(self, token_ids: Sequence[int]) -> list[str]:
        return [self.decode([token_id]) for token_id in token_ids]

    def output_piece(self, seed: int, index: int) -> tuple[int, str]:
        return self._output[(seed + index) % len(self._output)]


class HFTokenizer:
    """A Hugging Face `tokenizer.json`, through the `tokenizers` package."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as _HF  # optional dependency

        self._tok = _HF.from_file(str(path))
        self.vocab_size = self._tok.get_vocab_size()
        self._eos = _find_eos(self._tok, path.parent)
        # Output pieces: ids of ordinary words, so generated text reads as text.
        words = OUTPUT_TEXT.split(" ")
        ids: list[int] = []
        for word in words:
            ids.extend(self._tok.encode(" " + word, add_special_tokens=False).ids)
        self._output = [(i, self._tok.decode([i])) for i in ids if i != self._eos] or [(0, "")]

    @property
    def eos_token_id(self) -> int:
        return self._eos

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=True).ids
        return ids

    def decode(self, token_ids: Sequence[int]) -> str:
        text: str = self._tok.decode(list(token_ids), skip_special_tokens=False)
        return text

    def token_strs(self, token_ids: Sequence[int]) -> list[str]:
        return [self._tok.id_to_token(token_id) or "" for token_id in token_ids]

    def output_piece(self, seed: int, index: int) -> tuple[int, str]:
        return self._output[(seed + index) % len(self._output)]


def _find_eos(tok: Any, model_dir: Path) -> int:
    import json

    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            try:
                value = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
            except (OSError, ValueError):
                continue
            if isinstance(value, list) and value:
                value = value[0]
            if isinstance(value, int):
                return value
    for text in ("</s>", "<|eot_id|>", "<|endoftext|>", "<|im_end|>"):
        token_id = tok.token_to_id(text)
        if token_id is not None:
            return int(token_id)
    return EOS_TOKEN_ID


def load_tokenizer(model: str, vocab_size: int) -> Tokenizer:
    """The model directory's `tokenizer.json` when it has one and `tokenizers` is installed;
    the simple deterministic tokenizer otherwise."""
    path = Path(model) / "tokenizer.json"
    if path.is_file():
        try:
            return HFTokenizer(path)
        except ImportError:
            pass
    return SimpleTokenizer(max(vocab_size, NUM_RESERVED_IDS + 1024))
