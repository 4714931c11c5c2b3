"""The edge where specs come off the disk: stack files, keys files, local model configs.

The core parses text and values (`parse_stack_text`, `parse_keys_file`,
`model_from_hf_config_text`) and reads no file of the user's (tests/test_layering.py checks it);
this module does the reading, as the CLI does for traces. A pool whose `model` is a directory or
file holding a Hugging Face `config.json` is read here, when its stack is loaded, and handed to
the catalog as a parsed `ModelSpec`, so `fleet`, `plan` and `render` look it up by name and never
touch the disk.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from inhouse.errors import SpecError
from inhouse.spec.catalog import add_local_model, get_model, model_from_hf_config_text
from inhouse.spec.gateway import parse_keys_file
from inhouse.spec.model import ModelSpec
from inhouse.spec.stack import StackSpec, parse_stack_text

__all__ = [
    "MAX_SPEC_BYTES",
    "MAX_TRACE_BYTES",
    "load_stack",
    "model_from_hf_config",
    "read_keys_file",
    "read_spec_text",
    "resolve_local_models",
    "resolve_model",
]

# A spec is a few kilobytes (a plan's stack file with every tenant is well under this); a file
# past it is a wrong path or an attack, refused before a parser spends minutes on it.
MAX_SPEC_BYTES = 1024 * 1024
MAX_KEYS_FILE_BYTES = 16 * 1024 * 1024  # ~150,000 `TENANT HASH` lines
# A replayed trace is read whole (Mooncake's published traces are tens of MB).
MAX_TRACE_BYTES = 1024 * 1024 * 1024


def read_spec_text(path: Path, what: str, max_bytes: int = MAX_SPEC_BYTES) -> str:
    """The UTF-8 text of the regular file at `path`; a `SpecError` naming `what` and the file
    for anything else: missing, a directory, a FIFO or device (opened without blocking, so a
    pipe with no writer cannot hang the command), larger than `max_bytes`, not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise SpecError(f"cannot read {what} {path}: {exc.strerror}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise SpecError(f"cannot read {what} {path}: {kind}; give the path of a file")
    with os.fdopen(fd, "rb") as file:
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SpecError(
            f"{path}: larger than {max_bytes // 1024} KiB, too large for a {what}; check the path"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        bad = data[exc.start : exc.start + 1]
        raise SpecError(
            f"{path}: line {line} (byte {exc.start}) is not UTF-8 ({bad!r}); save the {what} "
            "as UTF-8 text (e.g. `iconv -t UTF-8`)"
        ) from None


def load_stack(path: Path | str) -> StackSpec:
    """The stack file at `path`, parsed, with its pools' local model configs read."""
    stack_path = Path(path)
    text = read_spec_text(stack_path, "stack file")
    stack = parse_stack_text(text, str(stack_path))
    resolve_local_models(pool.model for pool in stack.pools)
    return stack


def read_keys_file(path: Path) -> list[tuple[str, str]]:
    """(tenant, key hash) pairs from a keys file: `TENANT HASH` per line, `#` comments."""
    text = read_spec_text(path, "keys file", MAX_KEYS_FILE_BYTES)
    return parse_keys_file(text, str(path))


def model_from_hf_config(path: Path | str) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face `config.json` file."""
    config_path = Path(path)
    text = read_spec_text(config_path, "model config")
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
