from __future__ import annotations

from pathlib import Path

import pytest

from inhouse.drill.stack import LiveStack, StackError
from inhouse.launch.demo import demo_stack


@pytest.mark.parametrize("engine", ["vllm", "sglang", "url"])
def test_a_pool_that_is_not_simulated_is_refused_with_a_way_that_exists(
    engine: str, tmp_path: Path
) -> None:
    stack = demo_stack(2).model_copy(update={"engine": engine})
    with pytest.raises(StackError) as refused:
        LiveStack(stack, {}, tmp_path)
    message = str(refused.value)
    assert f"engine {engine}" in message and "inhouse drill plan" in message
    assert "use --attach" not in message and "without --attach" not in message  # not in this build
