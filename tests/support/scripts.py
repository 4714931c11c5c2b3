"""Load a repository script (`scripts/`, `benchmarks/`) as a module, to test its functions:
they are run by path, not installed, so no import reaches them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str) -> ModuleType:
    """The module at ROOT/`relative`, registered under its file's stem (a dataclass or a
    pickled task in it resolves its module by that name)."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module
