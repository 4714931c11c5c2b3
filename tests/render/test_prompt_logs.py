"""A prompt never reaches Loki by default: Loki gets only what the gateway and the engines
write (Alloy tails their containers' output), so the live stack's every output byte is
checked for a marked prompt. With prompt logging turned on the marker does show up (the test
can fail), and every line carrying it matches the pattern Alloy's pipeline drops.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from inhouse.render.k8s_logging import PROMPT_LINE
from inhouse.spec.stack import parse_stack

from .live_stack import DEMO_KEY, live_stack

MARKER = "account-4411-9723-secret"
STACK = parse_stack(
    {
        "name": "logs",
        "pools": [
            {
                "name": "chat",
                "model": "meta-llama/Llama-3.1-8B-Instruct",
                "served_model_name": "chat",
                "knobs": {"max_model_len": 2048},
            }
        ],
    }
)


def _send_marked_requests(gateway: str) -> None:
    headers = {"authorization": f"Bearer {DEMO_KEY}"}
    chat = {"model": "chat", "messages": [{"role": "user", "content": f"my {MARKER}"}],
            "max_tokens": 4}  # fmt: skip
    completion = {"model": "chat", "prompt": f"note {MARKER}", "max_tokens": 4}
    with httpx.Client(base_url=gateway, headers=headers, timeout=30) as client:
        assert client.post("/v1/chat/completions", json=chat).status_code == 200
        assert client.post("/v1/completions", json=completion).status_code == 200
        with client.stream("POST", "/v1/chat/completions", json={**chat, "stream": True}) as r:
            assert r.status_code == 200
            r.read()
        bad = client.post("/v1/chat/completions", json={**chat, "max_tokens": -1})
        assert bad.status_code == 400  # an error path logs too


@pytest.mark.parametrize("log_prompts", [False, True], ids=["default", "prompts-on"])
def test_a_prompt_reaches_the_logs_only_when_asked(tmp_path: Path, log_prompts: bool) -> None:
    with live_stack(STACK, tmp_path, "logs", log_prompts=log_prompts) as live:
        _send_marked_requests(live.gateway_url)
    text = live.log_text()
    assert "request" in text  # the request records were written
    marked = [line for line in text.splitlines() if MARKER in line]
    if not log_prompts:
        assert marked == []
        return
    assert len(marked) >= 2  # the gateway's record and the engine's
    pattern = re.compile(PROMPT_LINE)
    assert [line for line in marked if not pattern.search(line)] == []
