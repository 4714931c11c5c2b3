"""Write a tiny model directory the way a Hugging Face checkpoint looks: a config, a
tokenizer, a generation config and weight shards in the safetensors format (an 8-byte header
length, a JSON header naming each tensor's dtype, shape and offsets, then the bytes). The
weights are random bytes from a seed: enough to sign, push, pull, tamper with and verify; the
simulated engine never reads them (the real-vLLM tests use `tests/server/tiny_llama.py`).
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

SHARD_NAME = "model-{index:05d}-of-{count:05d}.safetensors"


def write_safetensors(path: Path, tensors: dict[str, int], seed: int) -> None:
    """`tensors` maps a name to its number of bf16 elements (one row each)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, count in tensors.items():
        header[name] = {
            "dtype": "BF16",
            "shape": [count],
            "data_offsets": [offset, offset + 2 * count],
        }
        offset += 2 * count
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(text)))
        handle.write(text)
        handle.write(random.Random(seed).randbytes(offset))


def write_tiny_model(
    out: Path, num_shards: int = 2, shard_bytes: int = 2 * 2**20, seed: int = 0
) -> Path:
    """A model directory of `num_shards` shards of about `shard_bytes` each; returns `out`."""
    out.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
              "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 512,
              "torch_dtype": "bfloat16"}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    vocab = {f"t{i}": i for i in range(512)}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": vocab, "merges": []}}
    (out / "tokenizer.json").write_text(json.dumps(tokenizer))
    (out / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    index: dict[str, str] = {}
    for i in range(num_shards):
        name = SHARD_NAME.format(index=i + 1, count=num_shards)
        tensors = {f"model.layers.{i}.mlp.weight": shard_bytes // 2}
        write_safetensors(out / name, tensors, seed * 1000 + i)
        index.update({t: name for t in tensors})
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
    return out


def shards(model_dir: Path) -> list[Path]:
    return sorted(model_dir.glob("*.safetensors"))
