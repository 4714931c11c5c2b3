"""The pure core reads no file: what import-linter cannot see (`open()`, `Path.read_text`, ...).

The core packages are those of pyproject's first import-linter contract; the loading modules
named here are the edge where specs come off the disk. Package data shipped with the code
(`importlib.resources.files(...)...read_text()`) is part of the code, not the user's disk.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import inhouse

SRC = Path(inhouse.__file__).parent
LOADING_MODULES = {"inhouse.spec.load"}
FILE_METHODS = {
    "read_text",
    "read_bytes",
    "write_text",
    "write_bytes",
    "exists",
    "is_file",
    "is_dir",
    "iterdir",
    "glob",
    "rglob",
    "stat",
    "open",
}
OS_CALLS = {
    ("os", "listdir"),
    ("os", "scandir"),
    ("os", "open"),
    ("path", "exists"),
    ("path", "isfile"),
    ("path", "isdir"),
}


def _core_packages() -> list[str]:
    pyproject = SRC.parent.parent / "pyproject.toml"
    contracts = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"]
    return list(contracts["contracts"][0]["source_modules"])


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    relative = Path(*package.split(".")[1:])
    single = SRC / relative.with_suffix(".py")
    if single.is_file():
        yield package, single
        return
    for path in sorted((SRC / relative).rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        yield ".".join(("inhouse", *parts)).removesuffix(".__init__"), path


def _is_package_data(node: ast.expr) -> bool:
    """Whether a receiver chain starts at `resources.files(...)` (or `files(...)`)."""
    while isinstance(node, ast.Attribute | ast.Call):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "files":
                return True
            node = func
        else:
            node = node.value
    return False


def _file_access(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open":
        return "open()"
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value
    owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
    if (owner_name, func.attr) in OS_CALLS:
        return f"{owner_name}.{func.attr}()"
    if func.attr in FILE_METHODS and not _is_package_data(owner):
        return f".{func.attr}()"
    return None


def file_reads() -> list[str]:
    found = []
    for package in _core_packages():
        for module, path in _modules(package):
            if module in LOADING_MODULES:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and (what := _file_access(node)):
                    found.append(f"{module}:{node.lineno}: {what}")
    return found


def test_the_core_packages_are_found() -> None:
    packages = _core_packages()
    assert "inhouse.spec" in packages and "inhouse.plan" in packages
    modules = [m for p in packages for m, _ in _modules(p)]
    assert "inhouse.spec.catalog" in modules and "inhouse.hashing" in modules
    assert set(modules) >= LOADING_MODULES


def test_the_core_reads_no_file() -> None:
    assert file_reads() == [], "the core reads files; read them in inhouse.spec.load"


def _found(source: str) -> list[str]:
    calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
    return [what for call in calls if (what := _file_access(call)) is not None]


def test_the_check_sees_a_file_read() -> None:
    source = "import os\nPath('x').read_text()\nopen('y')\nos.listdir('.')\nos.path.isfile('z')\n"
    assert _found(source) == [".read_text()", "open()", "os.listdir()", "path.isfile()"]
    data = "resources.files('inhouse').joinpath('x').read_text()"
    assert _found(data) == []
