"""Who listens on a port: so that `inhouse up` calls a stack ready only when its own children
answer, never another process that happened to hold their ports (and answered `/health`).

* `busy_ports`: before anything starts, the ports the stack will listen on that something
  already holds (a bind test; `up` refuses to start, naming them).
* `listener_pids`: on Linux, the processes holding a listening TCP socket on a port (from
  `/proc/net/tcp{,6}` and each process's open sockets); None where that cannot be read, and
  then `up` relies on the bind test and on the child still running.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from pathlib import Path

_LISTEN = "0A"
_PROC = Path("/proc")


def busy_ports(host: str, ports: Iterable[int]) -> list[int]:
    """The ports of `ports` that cannot be bound on `host` right now."""
    busy = []
    for port in ports:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                busy.append(port)
    return busy


def _listening_inodes(port: int) -> set[str] | None:
    inodes: set[str] = set()
    found_table = False
    for table in ("tcp", "tcp6"):
        path = _PROC / "net" / table
        try:
            lines = path.read_text().splitlines()[1:]
        except OSError:
            continue
        found_table = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes if found_table else None


def listener_pids(port: int) -> set[int] | None:
    """Processes with a listening TCP socket on `port`; None if /proc cannot tell."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    pids: set[int] = set()
    if not wanted:
        return pids
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        pids.add(int(entry.name))
                        break
    return pids


def is_own_listener(port: int, group: int) -> bool | None:
    """Whether every listener on `port` is in process group `group` (a child of `up` and its
    workers); None when that cannot be told here."""
    pids = listener_pids(port)
    if pids is None:
        return None
    if not pids:
        return False
    for pid in pids:
        try:
            if os.getpgid(pid) != group:
                return False
        except OSError:
            return False
    return True
