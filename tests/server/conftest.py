"""Fixtures for the engine-server tests: engine options and free ports."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest

from inhouse.server.state import EngineOptions
from inhouse.spec.knobs import EngineKnobs

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def options_with_knobs(values: dict[str, Any]) -> EngineOptions:
    """`EngineOptions` from one flat mapping: knob names go into `knobs`."""
    knobs = {k: values.pop(k) for k in list(values) if k in EngineKnobs.model_fields}
    return EngineOptions(knobs=EngineKnobs(**knobs), **values)


@pytest.fixture
def make_options() -> Callable[..., EngineOptions]:
    """Llama-3.1-8B on an H100 served as `tiny` with 512 tokens of context, plus overrides."""

    def make(**overrides: Any) -> EngineOptions:
        values: dict[str, Any] = {
            "model": MODEL,
            "served_model_names": ("tiny",),
            "max_model_len": 512,
        }
        values.update(overrides)
        return options_with_knobs(values)

    return make


@pytest.fixture
def free_port() -> Callable[[], int]:
    def pick() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
            return port

    return pick
