"""The stack a drill runs against: the drill's own copy of a stack file, launched as `up` does.

`drill_stack` adds the drill's tenants (each with a key made here, held only as its hash in the
stack file): `drill-load` for the planned load, `drill-interactive` (tier interactive) and
`drill-flood` (limited: the long-prompt flood must be held by its limits). `LiveStack` starts
every simulated replica with its fault port (`--admin-port`), the gateway, and a
DCGM-compatible exporter whose GPUs belong to the replicas as `gpu_ids` (or TP order) give
them; it can signal, stop and restart single replicas, which is what drills do to them. Every
process is tethered to the drill (`launch.tether`): a drill killed outright takes them along.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from inhouse.drill.judge import free_port
from inhouse.drill.promconfig import drill_jobs
from inhouse.errors import InhouseError
from inhouse.gateway.keys import create_key, hash_key
from inhouse.launch.engine_args import ATTACHED_KINDS, replica_env, simulated_engine_args
from inhouse.launch.plan import INHOUSE, INHOUSE_ENGINE, child_env, gateway_process
from inhouse.launch.tether import popen
from inhouse.render.layout import replica_pod
from inhouse.spec.stack import PoolSpec, StackSpec, dump_stack, parse_stack

HOST = "127.0.0.1"
NODE_NAME = "drill-node-1"
LOAD_TENANT, INTERACTIVE_TENANT, FLOOD_TENANT = "drill-load", "drill-interactive", "drill-flood"
# The flood tenant's limits: the seeds' example tenant's tokens per minute, one request at a time.
# NOTE: measured on the demo stack, a tenant allowed 4 concurrent 32K-token prompts starves the
# other tenant's prefills (its p95 TTFT 2.2-2.5 s against 0.4 s): running prefill chunks are
# scheduled before waiting requests, in vLLM as here. The long-prompt drill catches that.
FLOOD_LIMITS: dict[str, int] = {"tpm": 400_000, "max_concurrency": 1, "rpm": 600}


class StackError(InhouseError):
    """The drill's stack did not start, or a drill cannot do this to it."""


def drill_stack(
    base: StackSpec, flood_limits: dict[str, int] | None = None
) -> tuple[StackSpec, dict[str, str]]:
    """The stack with the drill's tenants added, and their keys (tenant -> key)."""
    data = json.loads(base.model_dump_json(exclude_none=False))
    gateway = dict(data.get("gateway") or {})
    tenants = [t for t in gateway.get("tenants", []) if not t["name"].startswith("drill-")]
    keys: dict[str, str] = {}
    for name, tier, limits in (
        (LOAD_TENANT, "standard", {}),
        (INTERACTIVE_TENANT, "interactive", {}),
        (FLOOD_TENANT, "standard", FLOOD_LIMITS if flood_limits is None else flood_limits),
    ):
        key, _ = create_key()
        keys[name] = key
        tenants.append({"name": name, "tier": tier, "keys": [hash_key(key)], "limits": limits})
    gateway["tenants"] = tenants
    data["gateway"] = gateway
    return parse_stack(data, "the drill's stack"), keys


@dataclass
class Replica:
    name: str
    pool: str
    index: int
    port: int
    admin_port: int
    gpus: tuple[int, ...]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.admin_port}"

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _gpus_of(pool: PoolSpec, index: int, first_free: int) -> tuple[int, ...]:
    if pool.gpu_ids:
        return tuple(pool.gpu_ids[index])
    return tuple(range(first_free, first_free + pool.tp))


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as handle:
        return popen(
            argv,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def check_simulated(stack: StackSpec) -> None:
    """Drills start simulated engines: a pool of another engine kind is refused, saying what
    to do instead."""
    for pool in stack.pools:
        kind = stack.engine_of(pool)
        if kind != "simulated":
            # NOTE: not "use --attach": that flag is refused in this build.
            how = "is attached, not launched" if kind in ATTACHED_KINDS else "is not simulated"
            raise StackError(
                f"pool {pool.name}: engine {kind} {how}; drills start simulated engines "
                "(their fault port is what drills break them with). Set `engine: simulated` "
                "in a copy of the stack file, or drill this stack in production with "
                "`inhouse drill plan`"
            )


class LiveStack:
    """A launched drill stack: replicas, gateway, DCGM exporter; all children of this process."""

    def __init__(self, stack: StackSpec, keys: dict[str, str], work_dir: Path) -> None:
        self.stack = stack
        self.keys = keys
        self.work_dir = work_dir
        self.log_dir = work_dir / "logs"
        self.replicas: dict[str, Replica] = {}
        self.gateway_port = free_port()
        # NOTE: a port of its own, never the stack's fixed `gateway.metrics_port` (9464 by
        # default): two drills, or a drill beside a running stack, must not collide.
        self.gateway_metrics_port = free_port()
        self.dcgm_port, self.dcgm_admin_port = free_port(), free_port()
        self._others: list[subprocess.Popen[bytes]] = []
        self.gateway_proc: subprocess.Popen[bytes] | None = None
        next_gpu = 0
        check_simulated(stack)
        for pool in stack.pools:
            for index in range(pool.replicas):
                gpus = _gpus_of(pool, index, next_gpu)
                next_gpu = max(next_gpu, max(gpus) + 1)
                name = replica_pod(pool.name, index)  # the static layout's pod, as in a cluster
                self.replicas[name] = Replica(
                    name,
                    pool.name,
                    index,
                    free_port(),
                    free_port(),
                    gpus,
                    self.log_dir / f"{name}.log",
                )
        self.num_gpus = max(8, next_gpu)

    # -- paths and URLs --------------------------------------------------------------------
    @property
    def gateway_url(self) -> str:
        return f"http://{HOST}:{self.gateway_port}"

    @property
    def gateway_metrics_url(self) -> str:
        """The gateway's /metrics: on its metrics port (the API port has none)."""
        return f"http://{HOST}:{self.gateway_metrics_port}/metrics"

    @property
    def namespace(self) -> str:
        return self.stack.name

    @property
    def dcgm_admin_url(self) -> str:
        return f"http://{HOST}:{self.dcgm_admin_port}"

    def pool_of(self, name: str) -> PoolSpec:
        return next(p for p in self.stack.pools if p.name == self.replicas[name].pool)

    def scrape_jobs(self) -> list[dict[str, Any]]:
        """Prometheus jobs for the stack's processes, labelled as a cluster scrape labels them."""
        pools: dict[str, list[str]] = {}
        for r in sorted(self.replicas.values(), key=lambda r: (r.pool, r.index)):
            pools.setdefault(r.pool, []).append(r.url)
        return drill_jobs(self.stack, self.namespace, pools, self.gateway_metrics_url,
                          f"http://{HOST}:{self.dcgm_port}/metrics")  # fmt: skip

    # -- processes -------------------------------------------------------------------------
    def engine_argv(self, replica: Replica, load_time_s: float | None = None) -> list[str]:
        pool = self.pool_of(replica.name)
        args = simulated_engine_args(self.stack, pool, replica.index, replica.port, HOST)
        if load_time_s is not None:
            args = [*_without_flag(args, "--load-time-s"), "--load-time-s", f"{load_time_s:g}"]
        return [
            *INHOUSE_ENGINE,
            *args,
            "--admin-port",
            str(replica.admin_port),
            *replica.extra_args,
        ]

    def start_replica(self, name: str, load_time_s: float | None = None) -> Replica:
        replica = self.replicas[name]
        if replica.is_running:
            raise StackError(f"replica {name} is already running")
        env = child_env(replica_env(self.pool_of(name), replica.index))
        replica.process = _spawn(self.engine_argv(replica, load_time_s), env, replica.log)
        return replica

    def start(self, ready_timeout_s: float = 120.0) -> LiveStack:
        """Every process up and answering; on any failure, whatever did start is stopped."""
        try:
            return self._start(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, ready_timeout_s: float) -> LiveStack:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stack_path = self.work_dir / "stack.yaml"
        stack_path.write_text(dump_stack(self.stack), encoding="utf-8")
        for name in self.replicas:
            self.start_replica(name)
        self.wait_healthy(list(self.replicas), ready_timeout_s)
        endpoints = self.work_dir / "endpoints.json"
        pools: dict[str, list[str]] = {}
        for r in self.replicas.values():
            pools.setdefault(r.pool, []).append(r.url)
        endpoints.write_text(json.dumps({"pools": pools}, indent=2), encoding="utf-8")
        gateway = gateway_process(
            stack_path, endpoints, self.gateway_port, HOST, None, self.gateway_metrics_port
        )
        if gateway is None:
            raise StackError("no `inhouse gateway` in this install")
        log = self.log_dir / "gateway.log"
        self.gateway_proc = _spawn(gateway.argv, child_env(gateway.env), log)
        self._wait_url("gateway", self.gateway_url + "/health", self.gateway_proc, ready_timeout_s)
        self._start_dcgm(ready_timeout_s)
        return self

    def _start_dcgm(self, timeout_s: float) -> None:
        argv = [
            *INHOUSE,
            "dcgm-exporter",
            "--gpu",
            self.stack.pools[0].gpu,
            "--num-gpus",
            str(self.num_gpus),
            "--hostname",
            NODE_NAME,
            "--namespace",
            self.namespace,
            "--host",
            HOST,
            "--port",
            str(self.dcgm_port),
            "--admin-port",
            str(self.dcgm_admin_port),
        ]
        for r in self.replicas.values():
            argv += ["--replica", f"{r.name}={','.join(map(str, r.gpus))}@{r.url}"]
        proc = _spawn(argv, child_env({}), self.log_dir / "dcgm-exporter.log")
        self._others.append(proc)
        self._wait_url("dcgm-exporter", f"http://{HOST}:{self.dcgm_port}/metrics", proc, timeout_s)

    def _wait_url(
        self, name: str, url: str, proc: subprocess.Popen[bytes], timeout_s: float
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise StackError(f"{name} exited with code {proc.returncode}; see {self.log_dir}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            time.sleep(0.2)
        raise StackError(f"{name} not ready after {timeout_s:g} s; see {self.log_dir}")

    def wait_healthy(self, names: list[str], timeout_s: float) -> None:
        for name in names:
            replica = self.replicas[name]
            assert replica.process is not None, f"{name} was not started"
            self._wait_url(name, replica.url + "/health", replica.process, timeout_s)

    def signal(self, name: str, sig: signal.Signals) -> None:
        replica = self.replicas[name]
        if not replica.is_running or replica.process is None:
            raise StackError(f"replica {name} is not running")
        replica.process.send_signal(sig)

    def wait_exit(self, name: str, timeout_s: float) -> int | None:
        process = self.replicas[name].process
        assert process is not None, f"{name} was not started"
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        procs = [r.process for r in self.replicas.values() if r.process is not None]
        procs += self._others + ([self.gateway_proc] if self.gateway_proc else [])
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    # -- HTTP helpers ----------------------------------------------------------------------
    async def fault(self, name: str, fault: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.replicas[name].admin_url}/faults/{fault}"
        return await _post(url, body or {})

    async def dcgm_fault(self, fault: str, body: dict[str, Any]) -> Any:
        return await _post(f"{self.dcgm_admin_url}/faults/{fault}", body)


async def _post(url: str, body: dict[str, Any]) -> Any:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(url, json=body)
        response.raise_for_status()
        return response.json()


def _without_flag(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == flag:
            skip = True
        else:
            out.append(arg)
    return out
