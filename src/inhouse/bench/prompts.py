"""Workload requests as text prompts whose prefix structure survives tokenization.

A `WorkRequest` describes its prompt by chained block hashes, not by text. Because a block's
hash covers its whole prefix, rendering each full block from its hash alone gives byte-identical
text wherever two prompts share leading blocks, and different text everywhere else; the partial
last block and any fresh tokens come from the request id, so they are unique. No span ids are
needed, so the workload module is used as it is.

A "token" is one of 256 common three-letter English words with a leading space (" the"): four
characters, one token for `inhouse engine`'s tokenizer (four characters a token, cut from the
start) and for the usual BPE vocabularies (GPT, Llama, Qwen). Prompt lengths are thus the
workload's, up to what a real tokenizer does with a space and a word.

Multi-turn sessions re-send their real history: turn k+1 is turn k's prompt, the text the
server actually generated for it, and fresh text for the new tokens (tool output), so an engine
that caches generated blocks (vLLM does) can hit them as the workload's ideal cache assumes.
`salt` changes every word, so a new run does not hit what an earlier run left in the cache.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from inhouse.workload import WorkRequest

_WORD_TEXT = (
    "the and for are but not you all any can had her was one our out day get has him his "
    "how man new now old see two way who boy did its let put say she too use act add age "
    "ago aid aim air art ask bad bag bar bed big bit box bus buy car cat cow cry cup cut "
    "dog dry due ear eat egg end eye far fat few fit fix fly fun gas god gun guy hat hit "
    "hot ice ill job joy key kid lab law lay leg lie lip lot low map mix mom net nor oil "
    "own pay pen per pet pie pop pot raw red rid row run sad sea set sit six sky son sun "
    "tax tea ten tie tip toe top toy try war wet win yes yet zoo arm bat bay bee bet bid "
    "bin bow cab cap cop cub dam den dig dot dye elf era fan fee fig fin fog fox fur gap "
    "gym hen hip hop hug hut ink inn jam jar jaw jet kit lad lap led lid log mad mat mud "
    "mug nap nod nut oak odd off opt orb owl pad pan paw pea pig pin pit pub rag ram rat "
    "ray rib rim rod rub rug sap saw sew shy sin sip ski sob sow spa spy sum tab tag tan "
    "tap tar tin ton tub tug urn van vet vow wax web wig wit woe wok won yam yap yen zip "
    "ace ant ape ash"
)
WORDS = tuple(" " + w for w in _WORD_TEXT.split())
assert len(WORDS) == 256 and len(set(WORDS)) == 256, "the vocabulary must be 256 distinct words"
CHARS_PER_TOKEN = 4
MAX_BLOCK_CACHE = 1 << 18  # rendered blocks kept (about 20 MB for 16-token blocks)
MAX_HISTORY_CHARS = 1 << 28  # session histories kept, in characters


def words_from(key: bytes, num_tokens: int) -> str:
    """`num_tokens` words chosen by a hash of `key`, deterministic across processes."""
    parts: list[str] = []
    counter = 0
    while len(parts) < num_tokens:
        digest = blake2b(key + counter.to_bytes(4, "little"), digest_size=64).digest()
        parts.extend(WORDS[b] for b in digest[: num_tokens - len(parts)])
        counter += 1
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Payload:
    path: str
    body: bytes
    keep_text: bool


class PromptBuilder:
    """Builds the HTTP payload of each request and remembers session histories."""

    def __init__(
        self,
        *,
        salt: int,
        block_size: int,
        endpoint: str = "completions",
        model: str | None = None,
        ignore_eos: bool = True,
        continuous_usage: bool = False,
        stream: bool = True,
    ) -> None:
        assert endpoint in ("completions", "chat"), "endpoint is completions or chat"
        self.salt = salt.to_bytes(8, "little", signed=False)
        self.block_size = block_size
        self.endpoint = endpoint
        self.model = model
        self.ignore_eos = ignore_eos
        self.continuous_usage = continuous_usage
        self.stream = stream
        self._blocks: OrderedDict[int, str] = OrderedDict()
        self._history: OrderedDict[str, _Session] = OrderedDict()
        self._history_chars = 0
        # Turns sent and not yet answered: request id -> (session, prompt text, chat messages).
        self._pending: dict[str, tuple[str, str, list[dict[str, str]] | None]] = {}
        self._seen_sessions: set[str] = set()
        self.num_history_misses = 0

    # -- text ------------------------------------------------------------------------------

    def block_text(self, block_hash: int) -> str:
        text = self._blocks.get(block_hash)
        if text is None:
            key = self.salt + block_hash.to_bytes(16, "little", signed=True)
            text = words_from(key, self.block_size)
            if len(self._blocks) >= MAX_BLOCK_CACHE:
                self._blocks.popitem(last=False)
            self._blocks[block_hash] = text
        return text

    def fresh_text(self, request_id: str, num_tokens: int) -> str:
        return words_from(self.salt + b"fresh:" + request_id.encode(), max(num_tokens, 0))

    def prompt_text(self, request: WorkRequest) -> str:
        """Full blocks from their hashes, then unique words up to the prompt length."""
        hashes = request.prompt_hashes
        body = "".join(self.block_text(h) for h in hashes)
        rest = request.num_prompt_tokens - len(hashes) * self.block_size
        return body + self.fresh_text(request.request_id, rest)

    # -- payloads --------------------------------------------------------------------------

    def payload(self, request: WorkRequest) -> Payload:
        session = self._history.get(request.session_key) if request.session_key else None
        if request.session_key:
            if session is None and request.session_key in self._seen_sessions:
                self.num_history_misses += 1  # evicted, or the previous turn failed
            self._seen_sessions.add(request.session_key)
        if self.endpoint == "chat":
            messages = self._chat_messages(request, session)
            body: dict[str, Any] = {"messages": messages}
            path = "/v1/chat/completions"
        else:
            prompt = self._completion_prompt(request, session)
            body = {"prompt": prompt}
            path = "/v1/completions"
        model = request.model or self.model
        if model:
            body["model"] = model
        body["max_tokens"] = request.output_len
        body["stream"] = self.stream
        if self.stream:
            options: dict[str, bool] = {"include_usage": True}
            if self.continuous_usage:
                options["continuous_usage_stats"] = True
            body["stream_options"] = options
        if self.ignore_eos:
            body["ignore_eos"] = True
        if request.priority:
            body["priority"] = request.priority
        return Payload(path, _dumps(body), keep_text=request.session_key is not None)

    def _completion_prompt(self, request: WorkRequest, session: _Session | None) -> str:
        if session is None:
            text = self.prompt_text(request)
        else:
            new_tokens = request.num_prompt_tokens - session.num_tokens
            text = session.text + self.fresh_text(request.request_id, new_tokens)
        if request.session_key:
            self._pending[request.request_id] = (request.session_key, text, None)
        return text

    def _chat_messages(
        self, request: WorkRequest, session: _Session | None
    ) -> list[dict[str, str]]:
        if session is None or session.messages is None:
            messages = [{"role": "user", "content": self.prompt_text(request)}]
        else:
            new_tokens = request.num_prompt_tokens - session.num_tokens
            messages = [
                *session.messages,
                {"role": "user", "content": self.fresh_text(request.request_id, new_tokens)},
            ]
        if request.session_key:
            self._pending[request.request_id] = (request.session_key, "", messages)
        return messages

    # -- sessions ---------------------------------------------------------------------------

    def record_answer(self, request: WorkRequest, answer: str | None, ok: bool) -> None:
        """The server's answer to a session's turn: the next turn re-sends it."""
        entry = self._pending.pop(request.request_id, None)
        if entry is None or request.session_key is None:
            return
        key, text, messages = entry
        self._drop(key)
        if not ok or answer is None:
            return
        num_tokens = request.num_prompt_tokens + request.output_len
        if messages is not None:
            session = _Session(
                "", num_tokens, [*messages, {"role": "assistant", "content": answer}]
            )
            size = sum(len(m["content"]) for m in session.messages or ())
        else:
            session = _Session(text + answer, num_tokens, None)
            size = len(session.text)
        self._history[key] = session
        self._history_chars += size
        session.size = size
        while self._history_chars > MAX_HISTORY_CHARS and self._history:
            _, old = self._history.popitem(last=False)
            self._history_chars -= old.size

    def _drop(self, key: str) -> None:
        old = self._history.pop(key, None)
        if old is not None:
            self._history_chars -= old.size


@dataclass(slots=True)
class _Session:
    text: str  # completions: the prompt and answer so far
    num_tokens: int  # the workload's count of tokens in `text` / `messages`
    messages: list[dict[str, str]] | None  # chat: the conversation so far
    size: int = 0


def _dumps(body: dict[str, Any]) -> bytes:
    try:
        import orjson

        return orjson.dumps(body)
    except ImportError:  # pragma: no cover - depends on the environment
        return json.dumps(body, separators=(",", ":")).encode()
