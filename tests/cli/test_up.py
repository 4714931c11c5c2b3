"""`inhouse up` as a new user meets it (issue 16 item 10): the example requests it prints work,
it leaves no run directory behind, `--dry-run | head` ends quietly, and every documented
command line parses."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.cli.test_gateway import UP, free_port, stack_data
from tests.weights.tiny_model import write_tiny_model

from inhouse.cli.main import EXIT_BROKEN_PIPE, build_parser
from inhouse.cli.up import verified_weights
from inhouse.launch.engine_args import vllm_serve_args
from inhouse.spec.stack import parse_stack
from inhouse.weights.signature import sign_model
from inhouse.weights.trust import keygen

ROOT = Path(__file__).resolve().parents[2]
INHOUSE = [sys.executable, "-m", "inhouse.cli.main"]


def test_dry_run_into_a_closed_pipe_ends_quietly() -> None:
    process = subprocess.Popen(
        [*INHOUSE, "up", str(ROOT / "examples/crm-copilot/stack.yaml"), "--dry-run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # `| head -0`: the reader is gone before the first line
    err = process.stderr.read().decode()
    process.stderr.close()
    assert process.wait(60) == EXIT_BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_dry_run_writes_no_run_directory(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [*INHOUSE, "up", "--dry-run"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_up_prints_requests_that_work_and_cleans_up(tmp_path: Path) -> None:
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack_data(1)))
    runs = tmp_path / "tmp"
    runs.mkdir()
    port, base, metrics = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("INHOUSE_DEMO_KEY", "INHOUSE_API_KEY")}
    process = subprocess.Popen(
        [
            *UP,
            str(tmp_path / "stack.yaml"),
            "--port",
            str(port),
            "--engine-base-port",
            str(base),
            "--metrics-port",
            str(metrics),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "TMPDIR": str(runs)},
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line.strip())
            if "Ctrl-C stops the stack" in line:
                break
        assert len(list(runs.iterdir())) == 1  # the run directory, while the stack runs
        export = next(x for x in lines if x.startswith("export INHOUSE_API_KEY="))
        key = export.split("=", 1)[1]
        curl = next(x for x in lines if x.startswith("curl "))
        client = next(x for x in lines if x.startswith("python -c "))
        with_key = {**env, "INHOUSE_API_KEY": key}
        reply = subprocess.run(curl, shell=True, env=with_key, capture_output=True, text=True)
        assert '"chat.completion"' in reply.stdout, reply.stdout + reply.stderr
        argv = shlex.split(client)
        said = subprocess.run(
            [sys.executable, *argv[1:]], env=with_key, capture_output=True, text=True, timeout=60
        )
        assert said.returncode == 0 and said.stdout.strip(), said.stderr
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
    assert list(runs.iterdir()) == []  # the run directory went with the stack


def test_make_demo_installs_the_package_not_the_dev_tools() -> None:
    done = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True)
    installs = [x for x in done.stdout.splitlines() if "pip install" in x]
    assert installs and all("[dev]" not in x for x in installs), done.stdout


def documented_commands() -> list[tuple[str, str]]:
    """`inhouse ...` lines of the README's and docs' bash blocks (continuations joined,
    comments, pipes and a trailing `&` dropped, `[optional]` groups left out)."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        fence: str | None = None
        block: list[str] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.startswith("```"):
                if fence is None:
                    fence, block = line[3:].strip(), []
                    continue
                if fence in ("bash", "sh", "shell"):
                    text = "\n".join(block).replace("\\\n", " ")
                    found += [(path.name, x.strip()) for x in text.splitlines()]
                fence = None
                continue
            if fence is not None:
                block.append(line)
    out = []
    for name, line in found:
        command = re.sub(r"\[[^\]]*\]", "", line.split(" #")[0].split(" | ")[0]).strip()
        command = command.removesuffix("&").strip()
        if command.startswith("inhouse "):
            out.append((name, command))
    return out


@pytest.mark.parametrize(("doc", "command"), documented_commands())
def test_documented_commands_parse(doc: str, command: str) -> None:
    try:
        build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as exc:
        assert not exc.code, f"{doc}: `{command}` does not parse"


def test_up_reads_the_verified_checkpoints_config_for_fp8(tmp_path: Path) -> None:
    """A pool named as an FP8 model whose verified weights are a 16-bit checkpoint: `up` reads
    the verified directory's config.json, so vLLM is asked to quantize at load; the name
    alone said FP8, and the model was served at 16 bits."""
    keys = tmp_path / "keys"
    keygen(keys)
    model = write_tiny_model(tmp_path / "checkpoint", num_shards=1, shard_bytes=1024)
    sign_model(model, keys / "key.priv")
    weights = {"weights_dir": str(model), "public_key": str(keys / "key.pub")}
    pool = {"name": "chat", "model": "llama-3.1-8b-instruct-fp8", "quant": "fp8",
            "weights": weights}  # fmt: skip
    stack = parse_stack({"name": "s", "engine": "vllm", "pools": [pool]})
    args = argparse.Namespace(weights_cache=tmp_path / "cache")
    paths = verified_weights(args, stack, tmp_path)
    served = vllm_serve_args(stack, stack.pools[0], 0, 8000, model=paths["chat"])
    assert served[0] == str(model.resolve())
    assert served[served.index("--quantization") + 1] == "fp8"
