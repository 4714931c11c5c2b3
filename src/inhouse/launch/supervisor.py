"""Child processes of `inhouse up`: start, wait for readiness, watch, and stop them cleanly.

Each child runs in its own session (process group), so a terminal's Ctrl-C reaches only `up`,
which then sends SIGTERM to every child (engines drain, see docs/engine.md), waits up to the
stop timeout, and kills what is left, process group and all (vLLM's engine-core workers
included). Should `up` itself be killed (SIGKILL leaves it no say), every child is tethered
to it and dies with it, and the group keeper kills what is left of each child's process group
(vLLM's engine core and workers; `launch.tether`). Output goes to `<log_dir>/<name>.log`, or to our
stdout with a `[name]` prefix.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import httpx

from inhouse.launch.listeners import is_own_listener
from inhouse.launch.plan import ProcessSpec, child_env
from inhouse.launch.tether import popen


@dataclass
class Child:
    spec: ProcessSpec
    process: subprocess.Popen[bytes]
    log_path: Path | None
    is_ready: bool = False
    exit_reported: bool = False
    is_impostor: bool = False  # its port answered, but from another process

    def is_own_answer(self) -> bool:
        """The answer on its URL came from this child: it runs, and (where /proc tells) the
        port's listener is in its process group."""
        if self.process.poll() is not None:
            return False
        port = urlsplit(self.spec.url).port
        own = None if port is None else is_own_listener(port, self.process.pid)
        self.is_impostor = own is False
        return own is not False


class Supervisor:
    def __init__(self, log_dir: Path | None = None, out: IO[str] = sys.stdout) -> None:
        self.log_dir = log_dir
        self.out = out
        self.children: list[Child] = []

    def start(self, spec: ProcessSpec) -> Child:
        log_path = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"{spec.name}.log"
            with log_path.open("ab") as handle:
                process = popen(
                    spec.argv,
                    env=child_env(spec.env),
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        else:
            process = popen(
                spec.argv,
                env=child_env(spec.env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            threading.Thread(target=self._relay, args=(spec.name, process), daemon=True).start()
        child = Child(spec, process, log_path)
        self.children.append(child)
        return child

    def _relay(self, name: str, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None, "started with a pipe"
        for line in process.stdout:
            self.out.write(f"[{name}] {line.decode(errors='replace')}")
            self.out.flush()

    def log_tail(self, child: Child, num_lines: int = 20) -> str:
        if child.log_path is None or not child.log_path.exists():
            return ""
        lines = child.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-num_lines:])

    def wait_ready(self, timeout_s: float, poll_s: float = 0.5) -> list[str]:
        """Wait until every child answers its health URL with 200, itself (not another process
        holding its port). Returns problems (a child exited, or the timeout passed), empty
        when all are ready."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0, verify=False) as client:  # a local readiness probe
            while True:
                problems = []
                pending = [c for c in self.children if not c.is_ready]
                for child in pending:
                    code = child.process.poll()
                    if code is not None:
                        problems.append(f"{child.spec.name} exited with code {code} before ready")
                        continue
                    try:
                        response = client.get(child.spec.url + child.spec.health_path)
                    except httpx.HTTPError:
                        continue
                    child.is_ready = response.status_code == 200 and child.is_own_answer()
                if problems:
                    return problems
                if all(c.is_ready for c in self.children):
                    return []
                if time.monotonic() >= deadline:
                    late = [c for c in self.children if not c.is_ready]
                    problems = [f"not ready after {timeout_s:.0f} s: "
                                f"{', '.join(c.spec.name for c in late)}"]  # fmt: skip
                    problems += [
                        f"{c.spec.name}: {c.spec.url} answers, but another process holds its port"
                        for c in late
                        if c.is_impostor
                    ]
                    return problems
                time.sleep(poll_s)

    def new_exits(self) -> list[tuple[str, int]]:
        out = []
        for child in self.children:
            code = child.process.poll()
            if code is not None and not child.exit_reported:
                child.exit_reported = True
                out.append((child.spec.name, code))
        return out

    @property
    def num_alive(self) -> int:
        return sum(1 for c in self.children if c.process.poll() is None)

    def stop(self, timeout_s: float) -> None:
        """SIGTERM every child, wait up to `timeout_s`, then SIGKILL the stragglers' groups."""
        for child in self.children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        try:
            for child in self.children:
                remaining = max(0.0, deadline - time.monotonic())
                try:
                    child.process.wait(remaining)
                except subprocess.TimeoutExpired:
                    self.out.write(f"inhouse up: {child.spec.name} did not stop; killing it\n")
        except KeyboardInterrupt:  # a second Ctrl-C (or SIGTERM) while draining: stop now
            self.out.write("inhouse up: interrupted again; killing every process now\n")
            self.out.flush()
        for child in self.children:
            # Leftover workers of a child (vLLM's engine core) share its process group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.process.pid, signal.SIGKILL)
            child.process.wait()
