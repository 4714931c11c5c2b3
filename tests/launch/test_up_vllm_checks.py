"""`inhouse up` refuses, before it starts or pulls anything, the `vllm serve` values render
refuses (vLLM's parser or config checks would exit, or an `extra_args` flag overrides one up
sets): with render's own message where vLLM's refusal is the reason, in its own words where the
flag fights what up sets (render's talk of pods and Services means nothing to it); simulated
and attached pools are not vLLM's to judge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inhouse.cli import up
from inhouse.errors import SpecError
from inhouse.launch.vllm_checks import OWNED_EXTRA_FLAGS, check_launched_vllm_pools
from inhouse.render import render_stack
from inhouse.spec.stack import parse_stack

UP = [sys.executable, "-m", "inhouse.cli.up"]

# Each a value vLLM exits on before it loads the model, or an extra flag that fights up's.
BAD_POOLS: list[dict[str, Any]] = [
    {"lora_adapters": ["a"], "knobs": {"max_lora_rank": 24}},
    {"knobs": {"tool_call_parser": "llama3"}},
    {"knobs": {"extra_args": ["--port=9000"]}},
    {"knobs": {"extra_args": ["-tp", "2"]}},
    {"knobs": {"max_num_seqs": 256, "max_num_batched_tokens": 128}},
    {"knobs": {"long_prefill_token_threshold": 100_000, "max_model_len": 8192}},
    {"knobs": {"kv_cache_dtype": "bf16"}},
]


def _stack(engine: str, pool: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "checks",
        "engine": engine,
        "nodes": [{"gpu": "h100_sxm", "gpus_per_node": 8, "count": 1}],
        "pools": [{"name": "chat", "model": "llama-3.1-8b", **pool}],
    }


def _render_message(pool: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as refused:
        render_stack(parse_stack(_stack("vllm", pool)))
    return str(refused.value)


def _up_message(pool: dict[str, Any]) -> str:
    """What up refuses the pool with: render's message, but for a flag up owns, up's words."""
    with pytest.raises(SpecError) as refused:
        check_launched_vllm_pools(parse_stack(_stack("vllm", pool)))
    message = str(refused.value)
    if "extra_args" not in pool.get("knobs", {}):
        assert message == _render_message(pool)
    return message


def _write(tmp_path: Path, engine: str, pool: dict[str, Any]) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(_stack(engine, pool)), encoding="utf-8")
    return path


@pytest.mark.parametrize("pool", BAD_POOLS)
def test_up_dry_run_refuses_a_vllm_pool_render_refuses(
    tmp_path: Path, pool: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert up.main([str(_write(tmp_path, "vllm", pool)), "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert err == f"inhouse up: error: {_up_message(pool)}\n"
    assert out == ""  # no plan printed


@pytest.mark.parametrize("pool", BAD_POOLS[:3])
def test_up_exits_with_its_message_before_starting_anything(
    tmp_path: Path, pool: dict[str, Any]
) -> None:
    path = _write(tmp_path, "vllm", pool)
    runs = tmp_path / "tmp"  # where up would make its run directory
    runs.mkdir()
    done = subprocess.run(
        [*UP, str(path), "--engine-base-port", "20300", "--vllm-python", "/nonexistent/python"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(runs)},
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"inhouse up: error: {_up_message(pool)}" in done.stderr
    assert "Traceback" not in done.stderr
    assert "[chat-0]" not in done.stdout + done.stderr  # no engine was started
    assert list(runs.iterdir()) == []


def test_simulated_and_attached_pools_are_not_held_to_vllm_s_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {"lora_adapters": ["a"], "knobs": {"max_lora_rank": 24, "extra_args": ["--port=1"]}}
    assert up.main([str(_write(tmp_path, "simulated", bad)), "--dry-run"]) == 0
    assert "chat-0" in capsys.readouterr().out
    attached = {**bad, "urls": ["http://h:9"]}
    assert up.main([str(_write(tmp_path, "url", attached)), "--dry-run"]) == 0
    assert "http://h:9" in capsys.readouterr().out


# Words of the Kubernetes manifests that mean nothing to `up`, which starts local processes.
MANIFEST_WORDS = ("pod", "Service", "NetworkPolicy", "manifest", "nvidia.com/gpu", "KEDA")


@pytest.mark.parametrize("flag", sorted(OWNED_EXTRA_FLAGS))
def test_up_words_an_owned_extra_flag_for_the_processes_it_starts(
    tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`up` refused `--port` because "the probes, the Services and the NetworkPolicy" use the
    rendered port: render's words, printed by a command that starts no pod. Its refusal names
    the knob and the fix in terms of what up starts."""
    pool = {"knobs": {"extra_args": [f"{flag}=2"]}}
    assert up.main([str(_write(tmp_path, "vllm", pool)), "--dry-run"]) == 2
    _, err = capsys.readouterr()
    assert err.startswith(f"inhouse up: error: pool 'chat': knobs.extra_args '{flag}' "), err
    assert "`inhouse up`" in err.split("knobs.extra_args", 1)[1], err
    assert not [w for w in MANIFEST_WORDS if w in err], err
    assert "remove it" in err or "instead" in err, err
    assert err != f"inhouse up: error: {_render_message(pool)}\n"
