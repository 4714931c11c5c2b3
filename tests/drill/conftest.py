"""Drill tests run the real judge: Prometheus (Debian `prometheus`) and Alertmanager (Debian
`prometheus-alertmanager`), which `.ci` installs. Without them those tests skip, saying so."""

from __future__ import annotations

import shutil

import pytest
from tests.server.conftest import free_port, make_options

from inhouse.drill.judge import ALERTMANAGER_NAMES, PROMETHEUS_NAMES

__all__ = ["free_port", "make_options", "needs_judge", "needs_promtool"]


def _have(names: tuple[str, ...]) -> bool:
    return any(shutil.which(n) for n in names)


needs_judge = pytest.mark.skipif(
    not (_have(PROMETHEUS_NAMES) and _have(ALERTMANAGER_NAMES)),
    reason="prometheus and prometheus-alertmanager are not installed (.ci/apt-packages.txt)",
)
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (Debian prometheus)"
)
