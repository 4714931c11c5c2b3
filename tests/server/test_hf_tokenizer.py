"""A model directory's own `tokenizer.json` is used when the `tokenizers` package is present."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from inhouse.server.inprocess import inprocess_engine
from inhouse.server.state import EngineOptions
from inhouse.tokenizer import HFTokenizer, load_tokenizer

tokenizers = pytest.importorskip("tokenizers")

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 300,
    "max_position_embeddings": 512,
    "eos_token_id": 1,
}


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    bpe = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token=None))
    bpe.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(
        ["hello world, the quick brown fox jumps over the lazy dog"] * 20, trainer
    )
    bpe.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


def test_model_tokenizer_is_loaded_and_served(model_dir: Path) -> None:
    tok = load_tokenizer(str(model_dir), 300)
    assert isinstance(tok, HFTokenizer) and tok.eos_token_id == 1
    ids = tok.encode("hello world")
    assert tok.decode(ids) == "hello world"

    async def body() -> tuple[dict[str, object], dict[str, object]]:
        options = EngineOptions(model=str(model_dir), served_model_names=("t",))
        async with inprocess_engine(options) as engine:
            counted = await engine.client.post("/tokenize", json={"prompt": "hello world"})
            done = await engine.client.post(
                "/v1/completions", json={"prompt": "hello world", "max_tokens": 4}
            )
            return counted.json(), done.json()

    counted, done = asyncio.run(body())
    assert counted["tokens"] == ids
    assert done["usage"] == {  # type: ignore[comparison-overlap]
        "prompt_tokens": len(ids),
        "total_tokens": len(ids) + 4,
        "completion_tokens": 4,
        "prompt_tokens_details": {
            "cached_tokens": 0,
            "created_cache_tokens": None,  # a chat field: null on completions, as in vLLM
            "multimodal_tokens": None,
        },
        "completion_tokens_details": None,
    }


def test_ids_outside_the_models_vocabulary_are_a_400(model_dir: Path) -> None:
    """The `tokenizers` package raises OverflowError on them: a 400, not a 500."""

    async def body() -> list[tuple[int, str]]:
        options = EngineOptions(model=str(model_dir), served_model_names=("t",))
        async with inprocess_engine(options) as engine:
            replies = [
                await engine.client.post("/v1/completions", json={"prompt": [2**64]}),
                await engine.client.post("/v1/completions", json={"prompt": [300]}),
            ]
            # /detokenize skips an id past the vocabulary, as vLLM does.
            skipped = await engine.client.post("/detokenize", json={"tokens": [2**64, 300]})
            assert skipped.status_code == 200 and skipped.json() == {"prompt": ""}
            return [(r.status_code, r.json()["error"]["message"]) for r in replies]

    assert asyncio.run(body()) == [
        (400, f"Token id {2**64} is out of vocabulary"),
        (400, "Token id 300 is out of vocabulary"),
    ]
