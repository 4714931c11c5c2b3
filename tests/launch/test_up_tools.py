"""`inhouse up` passes the tool-calling flags to simulated engines as it does to vLLM (review,
stop 25): a stack whose model has a tool parser answers `tool_choice: "auto"` through the
gateway, as the vLLM deployment it stands in for does; before, the engine refused it."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml
from tests.support.processes import UP_READY, read_until, reap

UP = [sys.executable, "-m", "inhouse.cli.up"]
KEY = "ihk-demo-tools-test-key"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}


def _chat(tool_choice: object) -> dict[str, object]:
    return {"model": "tiny", "messages": [{"role": "user", "content": "weather in Oslo?"}],
            "tools": [TOOL], "tool_choice": tool_choice, "max_tokens": 40}  # fmt: skip


def test_a_simulated_replica_from_a_tool_calling_stack_takes_tool_choice_auto(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    stack = {"version": 1, "name": "tools", "pools": [{"name": "p", "model":
             "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "tiny",
             "knobs": {"max_model_len": 2048, "shutdown_timeout_s": 2}}]}  # fmt: skip
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack))
    port, metrics, base = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [*UP, str(tmp_path / "stack.yaml"), "--port", str(port), "--metrics-port",
         str(metrics), "--engine-base-port", str(base), "--demo-key", KEY,
         "--log-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        read_until(process, lambda line: UP_READY in line)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {KEY}"}
        auto = httpx.post(url, json=_chat("auto"), headers=headers, timeout=30)
        assert auto.status_code == 200, auto.text
        assert auto.json()["object"] == "chat.completion"
        required = httpx.post(url, json=_chat("required"), headers=headers, timeout=30)
        assert required.status_code == 200, required.text
        (call,) = required.json()["choices"][0]["message"]["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        reap(process, [])
