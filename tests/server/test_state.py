"""`inhouse engine`'s own settings: a LoRA name that no client could tell apart is refused at
start, naming the flag."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inhouse.errors import SpecError
from inhouse.server.state import EngineOptions, EngineState


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        (("=/adapters/x",), "--lora-modules '=/adapters/x': the adapter needs a name (NAME=PATH)"),
        (
            ("sql=/a", "sql=/b"),
            "--lora-modules: adapter name 'sql' is given twice; each adapter needs its own name",
        ),
        (
            ("tiny=/a",),
            "--lora-modules: adapter name 'tiny' is also a --served-model-name; requests for it "
            "could not reach the adapter",
        ),
    ],
)
def test_lora_names_clients_cannot_tell_apart_are_refused(
    make_options: Callable[..., EngineOptions], modules: tuple[str, ...], message: str
) -> None:
    with pytest.raises(SpecError) as raised:
        EngineState.build(make_options(lora_modules=modules))
    assert str(raised.value) == message
