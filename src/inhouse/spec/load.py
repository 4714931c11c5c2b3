"""The edge where specs come off the disk: stack files, keys files, local model configs.

The core parses text and values (`parse_stack_text`, `parse_keys_file`,
`model_from_hf_config_text`) and reads no file of the user's (tests/test_layering.py checks it);
this module does the reading, as the CLI does for traces. A pool whose `model` is a directory or
file holding a Hugging Face `config.json` is read here, when its stack is loaded, and handed to
the catalog as a parsed `ModelSpec`, so `fleet`, `plan` and `render` look it up by name and never
touch the disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from inhouse.errors import SpecError
from inhouse.spec.catalog import add_local_model, get_model, model_from_hf_config_text
from inhouse.spec.gateway import parse_keys_file
from inhouse.spec.model import ModelSpec
from inhouse.spec.stack import StackSpec, parse_stack_text

__all__ = [
    "load_stack",
    "model_from_hf_config",
    "read_keys_file",
    "resolve_local_models",
    "resolve_model",
]


def load_stack(path: Path | str) -> StackSpec:
    """The stack file at `path`, parsed, with its pools' local model configs read."""
    stack_path = Path(path)
    try:
        text = stack_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read stack file {stack_path}: {exc.strerror}") from exc
    stack = parse_stack_text(text, str(stack_path))
    resolve_local_models(pool.model for pool in stack.pools)
    return stack


def read_keys_file(path: Path) -> list[tuple[str, str]]:
    """(tenant, key hash) pairs from a keys file: `TENANT HASH` per line, `#` comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read keys file {path}: {exc.strerror}") from exc
    return parse_keys_file(text, str(path))


def model_from_hf_config(path: Path | str) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face `config.json` file."""
    config_path = Path(path)
    try:
        text = config_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read model config {config_path}: {exc}") from exc
    return model_from_hf_config_text(text, config_path)


def _local_config(name: str) -> Path | None:
    """The `config.json` that `name` names (a directory holding one, or the file), or None."""
    path = Path(name)
    if name.endswith(".json") or (path.is_dir() and (path / "config.json").is_file()):
        config_path = path if path.suffix == ".json" else path / "config.json"
        if config_path.is_file():
            return config_path
    return None


def resolve_local_models(names: Iterable[str]) -> None:
    """Read the config of each name that is a local model path and hand it to the catalog.

    A broken config is handed over as its error, raised where the model is looked up (as an
    unknown catalog name is), so loading a stack fails no sooner than it did."""
    for name in names:
        config_path = _local_config(name)
        if config_path is None:
            continue
        try:
            add_local_model(name, model_from_hf_config(config_path))
        except SpecError as exc:
            add_local_model(name, exc)


def resolve_model(name: str) -> ModelSpec:
    """`name` resolved as the catalog does, a local model path read first."""
    resolve_local_models((name,))
    return get_model(name)
