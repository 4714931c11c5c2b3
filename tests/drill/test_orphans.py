"""`inhouse drill` SIGKILLed takes its stack with it (review, stop 25): the engines, the
gateway, the DCGM exporter, Prometheus and Alertmanager, most of them started from asyncio's
executor threads, die with the drill instead of holding their ports."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.drill.conftest import needs_judge
from tests.support.processes import children_of, read_until, reap, wait_free, wait_gone

DRILL = [sys.executable, "-m", "inhouse.cli.main", "drill"]


def _ports_of(pids: list[int]) -> list[int]:
    """The TCP ports these processes listen on (their sockets' inodes in /proc/net/tcp)."""
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN, one of theirs
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


@needs_judge
def test_a_killed_drill_takes_its_stack_and_its_judge_with_it(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [*DRILL, "run", "kill-replica", "--quick", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    children: list[int] = []
    try:
        # The stack and the judge are up once Prometheus is.
        read_until(process, lambda line: "Prometheus" in line and " up at " in line)
        children = children_of(process.pid)
        names = {Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] for p in children}
        assert any(n.endswith(b"prometheus") for n in names), names
        assert any(n.endswith(b"alertmanager") for n in names), names
        assert len(children) >= 6, children  # 2 engines, gateway, DCGM exporter, the judge
        ports = _ports_of(children)
        assert len(ports) >= 8, ports  # engines and their fault ports, gateway and its metrics…
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        assert wait_gone(children, 5.0) == []
        assert wait_free(ports, 5.0) == []
    finally:
        reap(process, children)
