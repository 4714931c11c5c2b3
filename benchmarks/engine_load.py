"""Shared by the engine benchmarks: start `inhouse engine` as a process, drive it closed-loop
over HTTP with streaming completions, and read its metrics.

The closed loop is `vllm bench serve --max-concurrency C` with a random dataset: C clients
each send a request of exactly `isl` random token ids (nothing shared in the prefix cache) and
`osl` output tokens (`ignore_eos`), and send the next the moment the last finishes. TTFT is
send to first token; TPOT is `(e2e - ttft) / (osl - 1)` per request, both averaged over all
requests, as vLLM's benchmark does.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx


@dataclass(frozen=True)
class LoadResult:
    mean_ttft_ms: float
    mean_tpot_ms: float
    num_requests: int
    duration_s: float
    first_wave_ttft_ms: float  # the `concurrency` requests sent at time 0
    steady_ttft_ms: float  # the rest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_engine(
    args: list[str], port: int, cpu: int | None = None, nice: int = 0
) -> subprocess.Popen[bytes]:
    """`inhouse engine ARGS --port PORT`, pinned to one CPU when `cpu` is given, at scheduling
    priority `nice` (negative: ahead of other work on a shared host; needs privileges)."""
    command = [sys.executable, "-m", "inhouse.cli.engine", *args, "--port", str(port)]
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        command = ["taskset", "-c", str(cpu), *command]
    if nice:
        command = ["nice", "-n", str(nice), *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"engine exited with {process.returncode}: {' '.join(command)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("engine did not become ready")


async def closed_loop(
    url: str,
    isl: int,
    osl: int,
    concurrency: int,
    num_requests: int,
    seed: int = 0,
) -> LoadResult:
    """Clients send back to back, as `inhouse.predict.run_closed_loop` models them (no think
    time): what de-phases them is the engine's own API-server queue and scheduling."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(1000, 100_000) for _ in range(isl)] for _ in range(num_requests)]
    ttfts: dict[int, float] = {}
    tpots: list[float] = []
    next_index = 0
    host, port = url.removeprefix("http://").split(":")

    async def one(index: int, prompt: list[int]) -> None:
        # NOTE: a bare HTTP/1.1 client on asyncio streams, not httpx: at 64+ streams httpx's
        # per-chunk cost would make the load generator, not the engine, set the figures.
        body = json.dumps(
            {"prompt": prompt, "max_tokens": osl, "ignore_eos": True, "stream": True}
        ).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json"
            f"\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        sent = time.perf_counter()
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head + body)
        first: float | None = None
        tail = b""
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if first is None and b"data: " in tail + data:
                first = time.perf_counter()
            tail = (tail + data)[-64:]
            if b"data: [DONE]" in tail:
                break
        end = time.perf_counter()
        writer.close()
        assert first is not None and b"[DONE]" in tail, tail
        ttfts[index] = first - sent
        tpots.append((end - first) / (osl - 1))

    async def worker() -> None:
        nonlocal next_index
        while next_index < num_requests:
            index = next_index
            next_index += 1
            await one(index, prompts[index])

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    duration = time.perf_counter() - started
    first = [ttfts[i] for i in range(min(concurrency, num_requests))]
    rest = [ttfts[i] for i in range(len(first), num_requests)] or [0.0]
    return LoadResult(
        1000 * sum(ttfts.values()) / len(ttfts),
        1000 * sum(tpots) / len(tpots),
        len(ttfts),
        duration,
        1000 * sum(first) / len(first),
        1000 * sum(rest) / len(rest),
    )


def scrape(url: str) -> dict[str, float]:
    """Samples of /metrics as `name{labels}` -> value (labels as printed)."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
