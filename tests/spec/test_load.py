"""The edge that reads specs off the disk: local Hugging Face configs stand in for catalog
entries (moved from test_catalog.py with the reading; `get_model(path)` is now
`resolve_model(path)`, the loader's, since the catalog reads no file)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from inhouse.errors import SpecError
from inhouse.spec.catalog import get_model
from inhouse.spec.load import (
    MAX_SPEC_BYTES,
    load_stack,
    model_from_hf_config,
    read_keys_file,
    resolve_model,
)


def _write_config(directory: Path, **overrides: Any) -> Path:
    """A tiny Llama-shaped config.json; `overrides` set or (with None) delete fields."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
    }
    for key, value in overrides.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


# --- local Hugging Face configs -----------------------------------------------------------


def test_local_config_dir_loads(tmp_path: Path) -> None:
    config_path = _write_config(tmp_path / "tiny-llama")
    spec = resolve_model(str(tmp_path / "tiny-llama"))
    assert spec == model_from_hf_config(config_path)
    assert spec == resolve_model(str(config_path))
    assert spec.name == "tiny-llama"
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads) == (4, 256, 8)
    assert (spec.num_kv_heads, spec.head_dim, spec.intermediate_size) == (2, 32, 688)
    assert (spec.vocab_size, spec.max_context, spec.tie_word_embeddings) == (1000, 2048, True)
    assert not spec.is_moe


def test_local_moe_config_uses_the_expert_width(tmp_path: Path) -> None:
    config_path = _write_config(
        tmp_path / "tiny-moe",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        head_dim=64,
    )
    spec = model_from_hf_config(config_path)
    assert (spec.num_experts, spec.num_experts_per_tok) == (8, 2)
    assert spec.intermediate_size == 128
    assert spec.head_dim == 64


def test_local_mixtral_style_config_uses_intermediate_size(tmp_path: Path) -> None:
    config_path = _write_config(tmp_path / "tiny-mixtral", num_local_experts=8)
    spec = model_from_hf_config(config_path)
    assert spec.num_experts == 8
    assert spec.intermediate_size == 688


def test_local_config_missing_field_names_it(tmp_path: Path) -> None:
    config_path = _write_config(tmp_path / "broken", hidden_size=None)
    with pytest.raises(SpecError, match="missing field 'hidden_size'"):
        model_from_hf_config(config_path)
    with pytest.raises(SpecError, match="missing field 'hidden_size'"):
        resolve_model(str(tmp_path / "broken"))


def test_local_config_unreadable_raises(tmp_path: Path) -> None:
    path = tmp_path / "bad" / "config.json"
    path.parent.mkdir()
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SpecError, match="cannot read model config"):
        model_from_hf_config(path)


def test_a_stack_hands_its_local_model_to_the_core_read_once(tmp_path: Path) -> None:
    # The loader reads the pool's config.json; the catalog (and fleet, plan, render after it)
    # answers from what was read, so the directory may be gone by the time they ask.
    model_dir = tmp_path / "tiny-local"
    config_path = _write_config(model_dir)
    stack_file = tmp_path / "stack.yaml"
    stack_file.write_text(
        f"version: 1\nname: local\npools:\n  - name: p\n    model: {model_dir}\n", encoding="utf-8"
    )
    stack = load_stack(stack_file)
    config_path.unlink()
    model_dir.rmdir()
    assert get_model(stack.pools[0].model).name == "tiny-local"


def test_a_broken_local_config_fails_where_the_model_is_looked_up(tmp_path: Path) -> None:
    model_dir = tmp_path / "broken-local"
    _write_config(model_dir, num_hidden_layers=None)
    stack_file = tmp_path / "stack.yaml"
    stack_file.write_text(
        f"version: 1\nname: local\npools:\n  - name: p\n    model: {model_dir}\n", encoding="utf-8"
    )
    stack = load_stack(stack_file)  # loading fails no sooner than it did
    with pytest.raises(SpecError, match="missing field 'num_hidden_layers'"):
        get_model(stack.pools[0].model)


def test_the_catalog_alone_reads_no_local_path(tmp_path: Path) -> None:
    _write_config(tmp_path / "unread")
    with pytest.raises(SpecError, match="unknown model"):
        get_model(str(tmp_path / "unread"))


# --- what is not a readable spec file (hostile inputs) -------------------------------------


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    # Opening a FIFO for reading blocks until something writes to it: `inhouse render` hung.
    fifo = tmp_path / "stack.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match=r"stack\.yaml: not a regular file"):
        load_stack(fifo)


def test_a_directory_and_a_device_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"cannot read stack file .*: a directory"):
        load_stack(tmp_path)
    with pytest.raises(SpecError, match="/dev/zero: not a regular file"):
        load_stack("/dev/zero")  # read to the end, it was a MemoryError


def test_an_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "stack.yaml"
    big.write_text("version: 1\n" + "# padding\n" * (MAX_SPEC_BYTES // 10 + 1), encoding="utf-8")
    with pytest.raises(SpecError, match="larger than 1024 KiB, too large for a stack file"):
        load_stack(big)


def test_non_utf8_bytes_name_the_line(tmp_path: Path) -> None:
    latin1 = tmp_path / "stack.yaml"
    latin1.write_bytes("version: 1\n# caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecError, match=r"stack\.yaml: line 2 \(byte 16\) is not UTF-8"):
        load_stack(latin1)
    keys = tmp_path / "keys"
    keys.write_bytes(b"\xff\xfeacme")
    with pytest.raises(SpecError, match=r"line 1 .* save the keys file as UTF-8"):
        read_keys_file(keys)


def test_a_model_config_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SpecError, match=r"config\.json is a JSON object"):
        model_from_hf_config(path)
