"""A dcgm-exporter-compatible `/metrics` endpoint for GPUs that are not there, with faults.

The simulated stack has no GPUs, yet its alerts, dashboards and drills read DCGM's series. This
endpoint speaks dcgm-exporter's exposition: the field names of `inhouse.metric_names.DCGM_METRICS`
(every counter the rendered collectors ConfigMap enables), dcgm-exporter's label set (`gpu`,
`UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, and `pod`,
`namespace`, `container` for a GPU a replica holds, as dcgm-exporter's Kubernetes mode adds).

Load follows the replicas: a GPU assigned to a replica with an engine URL reads that engine's
`vllm:num_requests_running` and `vllm:kv_cache_usage_perc` at each scrape, and its utilization,
tensor and DRAM activity, power, temperature and memory use follow from them (a rough, monotone
mapping, documented in `GpuLoad`); an engine that does not answer leaves its GPUs idle with no
memory in use, as a dead process would.

Faults, on a separate admin port (bound to 127.0.0.1 unless told otherwise):

    GET  /faults                                       each GPU's injected state
    POST /faults/ecc_dbe      {"gpu": 0, "count": 1}   double-bit (uncorrectable) ECC errors
    POST /faults/ecc_sbe      {"gpu": 0, "count": 1}   single-bit (corrected) ECC errors
    POST /faults/remap        {"gpu": 0, "count": 1}   rows remapped for uncorrectable errors
    POST /faults/xid          {"gpu": 0, "xid": 79}    an XID: the last-XID gauge and its count
    POST /faults/temperature  {"gpu": 0, "celsius": 92}  hold the GPU temperature
    POST /faults/power        {"gpu": 0, "watts": 700}   hold the power draw
    POST /faults/hbm          {"gpu": 0, "share": 0.5}   HBM throughput at that share of healthy
                                                       (a throttled memory clock)
    POST /faults/clear        {"gpu": 0}               undo held values and the XID (counters
                                                       stay: they are counters); no gpu: all
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from inhouse.errors import SpecError
from inhouse.metric_names import DCGM_METRICS

log = logging.getLogger("inhouse.dcgm")

DRIVER_VERSION = "550.90.07"
XID_WINDOW_MS = "300000"  # dcgm-exporter's default --xid-count-window-size (5 min)
IDLE_POWER_SHARE = 0.12
IDLE_TEMP_C = 34.0
BUSY_TEMP_RISE_C = 36.0
SCRAPE_TIMEOUT_S = 0.5


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica's claim on GPUs: its name becomes the GPUs' `pod` label; its engine URL, when
    given, drives their load."""

    name: str
    gpus: tuple[int, ...]
    url: str | None = None


@dataclass(frozen=True, slots=True)
class GpuLoad:
    """What one engine scrape says, mapped to a GPU's activity.

    `activity` is 0 when nothing runs and rises to 1 as the running batch fills (half-way at 8
    running sequences). Kernels run whenever a batch does (GPU utilization and graphics-engine
    activity saturate at activity 0.5); decode is memory-bound, so the memory interface is busy
    for most of that time (DRAM activity 0.85 of graphics-engine time), tensor pipes less;
    power and temperature follow activity.
    """

    running: float = 0.0
    kv_usage: float = 0.0
    is_alive: bool = False

    @property
    def activity(self) -> float:
        return self.running / (self.running + 8.0) if self.running > 0 else 0.0


@dataclass(slots=True)
class GpuState:
    index: int
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    remapped_rows: int = 0
    last_xid: int = 0
    xid_counts: dict[int, int] = field(default_factory=dict)
    held_temp_c: float | None = None
    held_power_w: float | None = None
    hbm_share: float = 1.0
    energy_mj: float = 0.0
    last_scrape_s: float | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "gpu": self.index,
            "ecc_sbe": self.ecc_sbe,
            "ecc_dbe": self.ecc_dbe,
            "remapped_rows": self.remapped_rows,
            "last_xid": self.last_xid,
            "xid_counts": {str(k): v for k, v in sorted(self.xid_counts.items())},
            "held_temp_c": self.held_temp_c,
            "held_power_w": self.held_power_w,
            "hbm_share": self.hbm_share,
        }


def parse_replica(text: str) -> Replica:
    """`NAME=GPU[,GPU...][@URL]`, e.g. `chat-0=0,1,2,3@http://127.0.0.1:8101`."""
    match = re.fullmatch(r"([^=@\s]+)=([0-9]+(?:,[0-9]+)*)(?:@(\S+))?", text)
    if not match:
        raise SpecError(
            f"--replica {text!r}: expected NAME=GPU[,GPU...][@URL], "
            "e.g. chat-0=0,1,2,3@http://127.0.0.1:8101"
        )
    gpus = tuple(int(g) for g in match.group(2).split(","))
    return Replica(match.group(1), gpus, match.group(3))


class DcgmExporter:
    """The state behind the endpoint: GPUs, who holds them, injected faults."""

    def __init__(
        self,
        num_gpus: int,
        model_name: str,
        hbm_mib: int,
        power_limit_w: float,
        hostname: str,
        replicas: tuple[Replica, ...] = (),
        namespace: str = "default",
    ) -> None:
        if num_gpus < 1:
            raise SpecError("--num-gpus must be at least 1")
        self.gpus = [GpuState(i) for i in range(num_gpus)]
        self.model_name = model_name
        self.hbm_mib = hbm_mib
        self.power_limit_w = power_limit_w
        self.hostname = hostname
        self.namespace = namespace
        self.owner: dict[int, Replica] = {}
        for replica in replicas:
            for gpu in replica.gpus:
                if gpu >= num_gpus:
                    raise SpecError(
                        f"replica {replica.name!r} claims GPU {gpu}, but there are {num_gpus}"
                    )
                if gpu in self.owner:
                    raise SpecError(
                        f"GPU {gpu} is claimed by both {self.owner[gpu].name!r} and "
                        f"{replica.name!r}"
                    )
                self.owner[gpu] = replica

    def gpu(self, index: Any) -> GpuState:
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError(f"gpu must be a GPU index, got {index!r}")
        if not 0 <= index < len(self.gpus):
            raise ValueError(f"gpu {index} does not exist (0..{len(self.gpus) - 1})")
        return self.gpus[index]

    def labels(self, gpu: GpuState) -> str:
        pairs = [
            ("gpu", str(gpu.index)),
            ("UUID", f"GPU-{self.hostname}-{gpu.index:02d}"),
            ("pci_bus_id", f"00000000:{0x18 + 0x10 * gpu.index:02X}:00.0"),
            ("device", f"nvidia{gpu.index}"),
            ("modelName", self.model_name),
            ("Hostname", self.hostname),
            ("DCGM_FI_DRIVER_VERSION", DRIVER_VERSION),
        ]
        owner = self.owner.get(gpu.index)
        if owner is not None:
            pairs += [("container", "engine"), ("namespace", self.namespace), ("pod", owner.name)]
        return ",".join(f'{k}="{v}"' for k, v in pairs)

    def values(self, gpu: GpuState, load: GpuLoad, now_s: float) -> dict[str, float]:
        """Every field's value for one GPU now; integrates energy since the last scrape."""
        a = load.activity
        power_w = gpu.held_power_w
        if power_w is None:
            power_w = self.power_limit_w * (IDLE_POWER_SHARE + (0.85 - IDLE_POWER_SHARE) * a)
        if gpu.last_scrape_s is not None:
            gpu.energy_mj += power_w * 1000.0 * max(0.0, now_s - gpu.last_scrape_s)
        gpu.last_scrape_s = now_s
        temp_c = (
            gpu.held_temp_c if gpu.held_temp_c is not None else IDLE_TEMP_C + BUSY_TEMP_RISE_C * a
        )
        used_mib = 0.9 * self.hbm_mib if load.is_alive else 0.0
        return {
            "DCGM_FI_DEV_SM_CLOCK": 1980.0 if a else 345.0,
            "DCGM_FI_DEV_MEM_CLOCK": 2619.0 * gpu.hbm_share,
            "DCGM_FI_DEV_MEMORY_TEMP": temp_c + 4.0,
            "DCGM_FI_DEV_GPU_TEMP": temp_c,
            "DCGM_FI_DEV_POWER_USAGE": power_w,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": gpu.energy_mj,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
            "DCGM_FI_DEV_GPU_UTIL": 100.0 * min(1.0, 2.0 * a),
            "DCGM_FI_DEV_MEM_COPY_UTIL": 100.0 * 0.8 * a,
            "DCGM_FI_DEV_XID_ERRORS": float(gpu.last_xid),
            "DCGM_FI_DEV_FB_FREE": self.hbm_mib - used_mib,
            "DCGM_FI_DEV_FB_USED": used_mib,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0.0,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": float(gpu.remapped_rows),
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0.0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.95 * min(1.0, 2.0 * a),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.35 * a,
            "DCGM_FI_PROF_DRAM_ACTIVE": 0.85 * min(1.0, 2.0 * a) * gpu.hbm_share,
            "DCGM_FI_PROF_PCIE_TX_BYTES": 2.0e6 * a,
            "DCGM_FI_PROF_PCIE_RX_BYTES": 4.0e6 * a,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": float(gpu.ecc_sbe),
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": float(gpu.ecc_dbe),
            "DCGM_FI_DEV_POWER_VIOLATION": 0.0,
            "DCGM_FI_DEV_THERMAL_VIOLATION": 0.0,
        }

    def exposition(self, loads: dict[int, GpuLoad], now_s: float) -> str:
        """The `/metrics` text: each field once with HELP and TYPE, then one sample per GPU."""
        per_gpu = [
            (self.labels(g), self.values(g, loads.get(g.index, GpuLoad()), now_s))
            for g in self.gpus
        ]
        lines: list[str] = []
        for f in DCGM_METRICS:
            lines += [f"# HELP {f.name} {f.help}", f"# TYPE {f.name} {f.kind}"]
            if f.name == "DCGM_EXP_XID_ERRORS_COUNT":
                for gpu, (labels, _) in zip(self.gpus, per_gpu, strict=True):
                    for xid, count in sorted(gpu.xid_counts.items()):
                        extra = f'window_size_in_ms="{XID_WINDOW_MS}",xid="{xid}"'
                        lines.append(f"{f.name}{{{labels},{extra}}} {count}")
                continue
            for labels, values in per_gpu:
                lines.append(f"{f.name}{{{labels}}} {values[f.name]:g}")
        return "\n".join(lines) + "\n"

    def inject(self, name: str, body: dict[str, Any]) -> None:
        """Apply one fault; raises ValueError (or KeyError for an unknown fault)."""
        if name == "clear":
            targets = self.gpus if "gpu" not in body else [self.gpu(body["gpu"])]
            for g in targets:
                g.last_xid, g.held_temp_c, g.held_power_w = 0, None, None
                g.hbm_share = 1.0
            return
        gpu = self.gpu(body.get("gpu"))
        if name in ("ecc_dbe", "ecc_sbe", "remap"):
            count = _positive_int(body.get("count", 1), "count")
            attr = {"ecc_dbe": "ecc_dbe", "ecc_sbe": "ecc_sbe", "remap": "remapped_rows"}[name]
            setattr(gpu, attr, getattr(gpu, attr) + count)
        elif name == "xid":
            xid = _positive_int(body.get("xid"), "xid")
            gpu.last_xid = xid
            gpu.xid_counts[xid] = gpu.xid_counts.get(xid, 0) + 1
        elif name == "temperature":
            gpu.held_temp_c = _number(body.get("celsius"), "celsius")
        elif name == "power":
            watts = _number(body.get("watts"), "watts")
            if not 0 <= watts <= 10 * self.power_limit_w:  # the energy counter integrates it
                raise ValueError(
                    f"watts must be in 0..{10 * self.power_limit_w:g} (ten times the GPU's "
                    f"power limit), got {watts!r}"
                )
            gpu.held_power_w = watts
        elif name == "hbm":
            share = _number(body.get("share"), "share")
            if not 0 < share <= 1:
                raise ValueError(f"share must be in (0, 1], got {share!r}")
            gpu.hbm_share = share
        else:
            raise KeyError(name)


MAX_COUNT = 2**53  # the largest whole number a sample's float value holds exactly


def _positive_int(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_COUNT:
        raise ValueError(f"{name} must be a positive whole number up to 2**53, got {value!r}")
    return value


def _number(value: Any, name: str) -> float:
    """A finite number: JSON's NaN and Infinity (and 1e400, which parses as infinity) would
    otherwise be served as samples, and a held power would poison the energy counter."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


_SAMPLE = re.compile(r"^(vllm:num_requests_running|vllm:kv_cache_usage_perc)(?:\{[^}]*\})?\s+(\S+)")


def parse_engine_load(text: str) -> GpuLoad:
    """The running count and KV use from a vLLM `/metrics` text (summed over its series)."""
    running = kv = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        if match.group(1) == "vllm:num_requests_running":
            running += float(match.group(2))
        else:
            kv = max(kv, float(match.group(2)))
    return GpuLoad(running=running, kv_usage=kv, is_alive=True)


async def scrape_loads(exporter: DcgmExporter, client: httpx.AsyncClient) -> dict[int, GpuLoad]:
    """Each GPU's load from its replica's engine; a replica without a URL is alive and idle."""
    by_replica: dict[str, GpuLoad] = {}
    for replica in {r.name: r for r in exporter.owner.values()}.values():
        if replica.url is None:
            by_replica[replica.name] = GpuLoad(is_alive=True)
            continue
        try:
            response = await client.get(f"{replica.url.rstrip('/')}/metrics")
            response.raise_for_status()
            by_replica[replica.name] = parse_engine_load(response.text)
        except httpx.HTTPError:
            by_replica[replica.name] = GpuLoad()
    return {gpu: by_replica[r.name] for gpu, r in exporter.owner.items()}


def create_metrics_app(
    exporter: DcgmExporter, clock: Any, client: httpx.AsyncClient | None = None
) -> Starlette:
    """`/metrics` and `/health`; `clock()` gives seconds (energy integrates over it), `client`
    scrapes the engines (tests pass one with a mock transport)."""
    if client is None:
        client = httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S)

    async def metrics(request: Request) -> Response:
        loads = await scrape_loads(exporter, client)
        return PlainTextResponse(
            exporter.exposition(loads, clock()), media_type="text/plain; version=0.0.4"
        )

    async def health(request: Request) -> Response:
        return PlainTextResponse("OK")

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"]), Route("/health", health)])


def create_fault_app(exporter: DcgmExporter) -> Starlette:
    async def get_faults(request: Request) -> Response:
        return JSONResponse({"gpus": [g.describe() for g in exporter.gpus]})

    async def post_fault(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            raw = await request.body()
            body = json.loads(raw) if raw.strip() else {}
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            exporter.inject(name, body)
        except KeyError:
            return JSONResponse({"error": f"unknown fault {name!r}"}, status_code=404)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        log.warning("dcgm fault injection: %s %s", name, body)
        return JSONResponse({"gpus": [g.describe() for g in exporter.gpus]})

    return Starlette(
        routes=[
            Route("/faults", get_faults, methods=["GET"]),
            Route("/faults/{name}", post_fault, methods=["POST"]),
        ]
    )


async def serve_dcgm(
    exporter: DcgmExporter,
    host: str,
    port: int,
    admin_host: str = "127.0.0.1",
    admin_port: int | None = None,
) -> int:
    """Serve `/metrics` (and the fault port when asked) until SIGINT or SIGTERM."""

    def config(app: Starlette, bind_host: str, bind_port: int) -> uvicorn.Config:
        return uvicorn.Config(
            app, host=bind_host, port=bind_port, lifespan="off", log_config=None, access_log=False
        )

    servers = [uvicorn.Server(config(create_metrics_app(exporter, time.monotonic), host, port))]
    if admin_port is not None:
        servers.append(uvicorn.Server(config(create_fault_app(exporter), admin_host, admin_port)))
        log.info("dcgm fault injection on http://%s:%d/faults", admin_host, admin_port)
    log.info(
        "dcgm-exporter (simulated, %d x %s) on http://%s:%d/metrics",
        len(exporter.gpus),
        exporter.model_name,
        host,
        port,
    )
    await asyncio.gather(*(s.serve() for s in servers))
    return 0 if all(s.started for s in servers) else 1
