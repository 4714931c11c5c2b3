"""bad-signature: one byte of a signed model's weights changed; the replica must refuse to
start, name the file, never turn ready and never get traffic; with the intact weights it starts.

Uses `inhouse weights` (OpenSSF model-signing, issue 17) through its commands only: the drill
makes a small model directory (a config, a tokenizer file, weight shards), `weights keygen` a
key pair, `weights sign`s it, copies it with one byte of one shard flipped (the signature copied
beside it), and starts one replica of the pool with `--weights-dir DIR --public-key PUB`, under
load, first on the altered copy, then on the intact one.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx

from inhouse.bench.metrics import RequestResult
from inhouse.drill.context import DrillContext
from inhouse.drill.evidence import DrillResult
from inhouse.drill.load import Load, samples
from inhouse.drill.load import check_clients as load_check_clients
from inhouse.drill.probes import health_code, wait_healthy
from inhouse.drill.stack import LOAD_TENANT
from inhouse.drill.watch import RouteWatch
from inhouse.launch.plan import INHOUSE

SHARD = "model-00002-of-00003.safetensors"
SHARD_BYTES = 2 * 1024 * 1024
REFUSE_WITHIN_S = 60.0


def weights_available() -> bool:
    return importlib.util.find_spec("inhouse.cli.weights") is not None


def make_signed_model(root: Path) -> tuple[Path, Path, Path]:
    """(intact model dir, altered copy, public key): signed with a key made here."""
    model = root / "drill-model"
    if root.exists():
        shutil.rmtree(root)
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (model / "tokenizer_config.json").write_text("{}")
    for i in range(1, 4):
        name = f"model-0000{i}-of-00003.safetensors"
        (model / name).write_bytes(
            bytes((i * 31 + j) % 251 for j in range(256)) * (SHARD_BYTES // 256)
        )
    _weights(["keygen", "--out", str(root / "keys")])
    _weights(["sign", str(model), "--key", str(root / "keys" / "key.priv")])
    altered = root / "drill-model-altered"
    shutil.copytree(model, altered)
    shutil.copy(model.with_name(model.name + ".sig"), altered.with_name(altered.name + ".sig"))
    shard = altered / SHARD
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of one byte
    shard.write_bytes(bytes(data))
    return model, altered, root / "keys" / "key.pub"


def _weights(args: list[str]) -> None:
    done = subprocess.run([*INHOUSE, "weights", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"inhouse weights {args[0]} failed: {done.stderr.strip()[-500:]}")


async def run(ctx: DrillContext) -> None:
    res = ctx.result
    if not weights_available():
        res.check(
            "`inhouse weights` present",
            "issue 17's sign/verify commands in this build",
            "missing: this build has no `inhouse weights`",
            False,
        )
        return
    p = ctx.profile
    victim = [r for r in ctx.stack.replicas.values() if r.pool == p.pool][-1]
    model, altered, public = await asyncio.to_thread(
        make_signed_model, ctx.out_dir / "_run" / "weights"
    )
    ctx.event(f"signed {model.name}; {altered.name}: one byte of {SHARD} changed")
    params = {"sessions": p.peak_sessions, "model": p.model, "output": "60:200"}
    load = Load(ctx.gateway, ctx.key(LOAD_TENANT), "agent", params, 3600, model=p.model).start()
    watch = RouteWatch(ctx.stack.gateway_metrics_url, p.pool).start()
    index = str(victim.index)
    try:
        ctx.stack.signal(victim.name, signal.SIGTERM)
        await asyncio.to_thread(ctx.stack.wait_exit, victim.name, 60.0)
        await _until_gateway_drops(watch, index, time.perf_counter(), 15.0)
        log_start = victim.log.stat().st_size if victim.log.exists() else 0
        t_bad = time.perf_counter()
        victim.extra_args = ["--weights-dir", str(altered), "--public-key", str(public)]
        ctx.stack.start_replica(victim.name)
        ctx.event(f"start {victim.name} on the altered weights")
        code, saw_200 = await _watch_refusal(ctx, victim.name, victim.url)
        t_refused = time.perf_counter()
        if code is None:  # it did not refuse: stop it before the intact start
            ctx.stack.signal(victim.name, signal.SIGKILL)
            await asyncio.to_thread(ctx.stack.wait_exit, victim.name, 30.0)
        ctx.event(f"{victim.name} exited with code {code}")
        said = victim.log.read_text(errors="replace")[log_start:] if victim.log.exists() else ""
        victim.extra_args = ["--weights-dir", str(model), "--public-key", str(public)]
        ctx.stack.start_replica(victim.name)
        ctx.event(f"start {victim.name} on the intact weights")
        t_ready = await wait_healthy(victim.url, 60.0)
        ctx.event(f"{victim.name} /health 200")
        serves = await _serves(victim.url, p.model)
        await ctx.sleep(5.0)
    finally:
        victim.extra_args = []
        results = await load.finish()
        await watch.stop()
    res.samples = samples(results, ctx.t0)
    res.check(
        "the altered replica refuses to start",
        f"exits non-zero within {REFUSE_WITHIN_S:g} s",
        f"exit code {code}",
        code not in (None, 0),
    )
    last_lines = [line for line in said.splitlines() if SHARD in line][-1:] or said.splitlines()[
        -1:
    ]
    res.check(
        "the refusal names the file",
        f"its output names {SHARD}",
        (last_lines[0][:300] if last_lines else "no output"),
        SHARD in said,
    )
    routed = watch.routed_count(index, t_bad, t_refused)
    res.check(
        "never ready, never routed to",
        "no /health 200 and no request routed to it",
        f"/health 200 seen: {saw_200}; {routed:.0f} routed",
        not saw_200 and routed == 0,
    )
    joined = watch.first_healthy(index, t_ready or 1e18)
    res.check(
        "intact weights start and serve",
        "/health 200, answers a completion, the gateway takes it back",
        "never ready"
        if t_ready is None
        else f"ready; completion {'200' if serves else 'failed'}; gateway "
        + ("healthy" if joined else "not healthy"),
        t_ready is not None and serves and joined is not None,
    )
    check_clients(res, results)


def check_clients(res: DrillResult, results: list[RequestResult]) -> None:
    """No client request failed (before its first token or mid-stream) or was refused while
    the replica restarted twice; and there were requests."""
    load_check_clients(
        res, results, "clients unaffected", "no request fails or is refused meanwhile"
    )


async def _until_gateway_drops(
    watch: RouteWatch, index: str, since: float, timeout_s: float
) -> None:
    """Wait until the gateway counts the stopped replica unhealthy, so that what it routes
    afterwards is to the new process, not retries against the old one's closed port."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline and watch.first_unhealthy(index, since - 5.0) is None:
        await asyncio.sleep(0.2)


async def _serves(url: str, model: str) -> bool:
    body = {"model": model, "prompt": "drill", "max_tokens": 4}
    async with httpx.AsyncClient(timeout=30) as client:
        try:
            return (await client.post(f"{url}/v1/completions", json=body)).status_code == 200
        except httpx.HTTPError:
            return False


async def _watch_refusal(ctx: DrillContext, name: str, url: str) -> tuple[int | None, bool]:
    """Poll the refusing replica until it exits: its exit code, and whether /health ever
    answered 200 meanwhile."""
    process = ctx.stack.replicas[name].process
    assert process is not None, "started just before"
    deadline = time.perf_counter() + REFUSE_WITHIN_S
    saw_200 = False
    while time.perf_counter() < deadline and process.poll() is None:
        saw_200 = saw_200 or await health_code(url) == 200
        await asyncio.sleep(0.2)
    if process.poll() is None:
        return None, saw_200
    return process.returncode, saw_200
