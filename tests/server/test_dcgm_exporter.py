"""The simulated dcgm-exporter: DCGM's names and labels, load from the engines, faults per GPU."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inhouse.errors import SpecError
from inhouse.metric_names import DCGM_METRICS, metric_names_in_promql
from inhouse.render.alerts_gpu import ecc_alert, temperature_alert, xid_alert
from inhouse.server.dcgm_exporter import (
    DcgmExporter,
    Replica,
    create_fault_app,
    create_metrics_app,
    parse_engine_load,
    parse_replica,
)

ENGINE_METRICS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="chat"} 8.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="chat"} 0.5
"""


def exporter(*replicas: Replica) -> DcgmExporter:
    return DcgmExporter(
        num_gpus=4,
        model_name="NVIDIA H100 80GB HBM3",
        hbm_mib=81559,
        power_limit_w=700.0,
        hostname="gpu-node-1",
        replicas=replicas,
        namespace="crm",
    )


def parsed(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample. Not prometheus_client's parser: it appends
    `_total` to counters, which dcgm-exporter's names (and Prometheus) do not have."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z_:][\w:]*)\{(.*)\} (\S+)", line)
        assert match, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        out.append((match.group(1), labels, float(match.group(3))))
    return out


def samples(text: str) -> dict[tuple[str, str], float]:
    """(metric, gpu) -> value."""
    return {(name, labels["gpu"]): value for name, labels, value in parsed(text)}


def test_the_exposition_is_valid_prometheus_text() -> None:
    dcgm = exporter(Replica("chat-0", (0,), None))
    dcgm.inject("xid", {"gpu": 0, "xid": 79})
    families = {f.name for f in text_string_to_metric_families(scrape(dcgm, set(), [0.0]))}
    assert "DCGM_FI_DEV_GPU_TEMP" in families and "DCGM_EXP_XID_ERRORS_COUNT" in families


def engine_transport(alive: set[str]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host in alive:
            return httpx.Response(200, text=ENGINE_METRICS)
        raise httpx.ConnectError("connection refused", request=request)

    return httpx.MockTransport(handler)


def scrape(dcgm: DcgmExporter, alive: set[str], now: list[float]) -> str:
    client = httpx.AsyncClient(transport=engine_transport(alive))
    app = create_metrics_app(dcgm, lambda: now[0], client)

    async def main() -> str:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dcgm") as c:
            response = await c.get("/metrics")
            assert response.status_code == 200
            return response.text

    return asyncio.run(main())


def post(dcgm: DcgmExporter, name: str, body: object) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_fault_app(dcgm))
        async with httpx.AsyncClient(transport=transport, base_url="http://admin") as c:
            return await c.post(f"/faults/{name}", json=body)

    return asyncio.run(main())


def test_exposes_every_dcgm_field_the_alerts_read_with_dcgm_exporter_labels() -> None:
    dcgm = exporter(Replica("chat-0", (0, 1), None))
    rows = parsed(scrape(dcgm, set(), [0.0]))
    exposed = {name for name, _, _ in rows}
    read = set()
    for alert in (ecc_alert("x"), xid_alert("x"), temperature_alert("x")):
        read |= metric_names_in_promql(alert.expr)
    # The XID count gauge has no sample until an XID happens, as in dcgm-exporter.
    assert read - {"DCGM_EXP_XID_ERRORS_COUNT"} <= exposed
    assert {f.name for f in DCGM_METRICS} - {"DCGM_EXP_XID_ERRORS_COUNT"} <= exposed
    temps = {labels["gpu"]: labels for name, labels, _ in rows if name == "DCGM_FI_DEV_GPU_TEMP"}
    assert temps["0"] == {
        "gpu": "0",
        "UUID": "GPU-gpu-node-1-00",
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "gpu-node-1",
        "DCGM_FI_DRIVER_VERSION": "550.90.07",
        "container": "engine",
        "namespace": "crm",
        "pod": "chat-0",
    }
    assert "pod" not in temps["3"]


def test_load_follows_the_replicas_engine_and_a_dead_engine_frees_its_gpus() -> None:
    dcgm = exporter(
        Replica("chat-0", (0, 1), "http://e0:8000"), Replica("chat-1", (2, 3), "http://e1:8000")
    )
    now = [100.0]
    first = samples(scrape(dcgm, {"e0"}, now))
    # 8 running: activity 0.5 on chat-0's GPUs; chat-1's engine does not answer.
    assert first[("DCGM_FI_PROF_DRAM_ACTIVE", "0")] == pytest.approx(0.85)
    assert first[("DCGM_FI_DEV_GPU_UTIL", "1")] == pytest.approx(100.0)
    assert first[("DCGM_FI_DEV_FB_USED", "0")] == pytest.approx(0.9 * 81559)
    assert first[("DCGM_FI_PROF_DRAM_ACTIVE", "2")] == 0.0
    assert first[("DCGM_FI_DEV_FB_USED", "3")] == 0.0
    busy_w = first[("DCGM_FI_DEV_POWER_USAGE", "0")]
    idle_w = first[("DCGM_FI_DEV_POWER_USAGE", "2")]
    assert busy_w > idle_w > 0
    now[0] = 110.0
    second = samples(scrape(dcgm, {"e0"}, now))
    # Energy integrates the draw over the 10 s between scrapes, in mJ.
    assert second[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0")] == pytest.approx(
        busy_w * 1000 * 10
    )


def test_faults_per_gpu_and_clear_keeps_the_counters() -> None:
    dcgm = exporter()
    assert post(dcgm, "ecc_dbe", {"gpu": 2, "count": 1}).status_code == 200
    assert post(dcgm, "xid", {"gpu": 2, "xid": 48}).status_code == 200
    assert post(dcgm, "temperature", {"gpu": 1, "celsius": 92}).status_code == 200
    text = scrape(dcgm, set(), [0.0])
    values = samples(text)
    assert values[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "2")] == 1
    assert values[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0")] == 0
    assert values[("DCGM_FI_DEV_XID_ERRORS", "2")] == 48
    assert values[("DCGM_EXP_XID_ERRORS_COUNT", "2")] == 1
    assert values[("DCGM_FI_DEV_GPU_TEMP", "1")] == 92
    post(dcgm, "clear", {})
    after = samples(scrape(dcgm, set(), [1.0]))
    assert after[("DCGM_FI_DEV_XID_ERRORS", "2")] == 0
    assert after[("DCGM_FI_DEV_GPU_TEMP", "1")] < 85
    assert after[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "2")] == 1  # a counter never goes down


def test_hbm_fault_slows_one_gpus_memory_until_cleared() -> None:
    dcgm = exporter(Replica("chat-0", (0, 1), "http://e0:8000"))
    assert post(dcgm, "hbm", {"gpu": 1, "share": 0.5}).status_code == 200
    values = samples(scrape(dcgm, {"e0"}, [0.0]))
    assert values[("DCGM_FI_PROF_DRAM_ACTIVE", "1")] == pytest.approx(0.425)
    assert values[("DCGM_FI_PROF_DRAM_ACTIVE", "0")] == pytest.approx(0.85)
    assert values[("DCGM_FI_DEV_MEM_CLOCK", "1")] == pytest.approx(2619 / 2)
    post(dcgm, "clear", {"gpu": 1})
    assert samples(scrape(dcgm, {"e0"}, [1.0]))[("DCGM_FI_PROF_DRAM_ACTIVE", "1")] == 0.85


@pytest.mark.parametrize(
    ("name", "body", "status", "words"),
    [
        ("ecc_dbe", {"gpu": 9}, 400, "gpu 9 does not exist (0..3)"),
        ("ecc_dbe", {"gpu": "0"}, 400, "gpu must be a GPU index"),
        ("ecc_dbe", {"gpu": 0, "count": 0}, 400, "count must be a positive whole number"),
        ("xid", {"gpu": 0}, 400, "xid must be a positive whole number"),
        ("power", {"gpu": 0, "watts": "lots"}, 400, "watts must be a number"),
        ("hbm", {"gpu": 0, "share": 1.5}, 400, "share must be in (0, 1]"),
        ("melt", {"gpu": 0}, 404, "unknown fault 'melt'"),
    ],
)
def test_bad_faults_say_what_is_wrong(name: str, body: object, status: int, words: str) -> None:
    response = post(exporter(), name, body)
    assert response.status_code == status
    assert words in response.json()["error"]


def test_replica_flags_parse_and_conflicts_are_refused() -> None:
    assert parse_replica("chat-0=0,1,2,3@http://127.0.0.1:8101") == Replica(
        "chat-0", (0, 1, 2, 3), "http://127.0.0.1:8101"
    )
    assert parse_replica("util=7") == Replica("util", (7,), None)
    with pytest.raises(SpecError, match="expected NAME=GPU"):
        parse_replica("chat-0:0,1")
    with pytest.raises(SpecError, match="claimed by both 'a' and 'b'"):
        exporter(Replica("a", (0, 1), None), Replica("b", (1,), None))
    with pytest.raises(SpecError, match="claims GPU 4, but there are 4"):
        exporter(Replica("a", (4,), None))


def test_engine_load_sums_running_over_series() -> None:
    text = ENGINE_METRICS + 'vllm:num_requests_running{engine="1",model_name="chat"} 2.0\n'
    load = parse_engine_load(text)
    assert (load.running, load.kv_usage, load.is_alive) == (10.0, 0.5, True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_the_command_serves_metrics_and_faults_over_sockets() -> None:
    port, admin = free_port(), free_port()
    command = [sys.executable, "-m", "inhouse.cli.main", "dcgm-exporter", "--num-gpus", "2"]
    command += ["--port", str(port), "--admin-port", str(admin), "--hostname", "node-a"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: httpx.get(f"{url}/health").status_code == 200)
        reply = httpx.post(f"http://127.0.0.1:{admin}/faults/ecc_dbe", json={"gpu": 1})
        assert reply.json()["gpus"][1]["ecc_dbe"] == 1
        values = samples(httpx.get(f"{url}/metrics").text)
        assert values[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "1")] == 1
        assert values[("DCGM_FI_DEV_POWER_USAGE", "0")] == pytest.approx(0.12 * 700)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert b"Traceback" not in err, err.decode()


def post_raw(dcgm: DcgmExporter, name: str, body: bytes) -> httpx.Response:
    async def main() -> httpx.Response:
        transport = httpx.ASGITransport(app=create_fault_app(dcgm))
        async with httpx.AsyncClient(transport=transport, base_url="http://admin") as c:
            return await c.post(f"/faults/{name}", content=body)

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("name", "body", "words"),
    [
        ("power", b'{"gpu": 0, "watts": NaN}', "watts must be a finite number"),
        ("power", b'{"gpu": 0, "watts": Infinity}', "watts must be a finite number"),
        ("power", b'{"gpu": 0, "watts": 1e400}', "watts must be a finite number"),
        ("power", b'{"gpu": 0, "watts": -700}', "watts must be in 0..7000"),
        ("power", b'{"gpu": 0, "watts": 1e300}', "watts must be in 0..7000"),
        ("temperature", b'{"gpu": 0, "celsius": NaN}', "celsius must be a finite number"),
        ("temperature", b'{"gpu": 0, "celsius": -Infinity}', "celsius must be a finite number"),
        ("hbm", b'{"gpu": 0, "share": NaN}', "share must be a finite number"),
        ("ecc_dbe", b'{"gpu": 0, "count": 1' + b"0" * 400 + b"}", "count must be a positive"),
        ("xid", b'{"gpu": 0, "xid": 1' + b"0" * 400 + b"}", "xid must be a positive"),
    ],
    ids=[
        "watts-nan",
        "watts-inf",
        "watts-1e400",
        "watts-negative",
        "watts-1e300",
        "celsius-nan",
        "celsius-minus-inf",
        "share-nan",
        "count-10e400",
        "xid-10e400",
    ],
)
def test_non_finite_negative_or_huge_faults_are_refused_and_metrics_keep_serving(
    name: str, body: bytes, words: str
) -> None:
    dcgm = exporter()
    response = post_raw(dcgm, name, body)
    assert response.status_code == 400
    assert words in response.json()["error"]
    scrape(dcgm, set(), [0.0])
    values = samples(scrape(dcgm, set(), [10.0]))
    energy = values[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0")]
    assert energy == pytest.approx(700.0 * 0.12 * 1000 * 10)  # idle power for 10 s, finite
    assert all(value == value and abs(value) != float("inf") for value in values.values())
