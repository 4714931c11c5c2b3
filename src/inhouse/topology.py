"""GPU interconnect topology from `nvidia-smi topo -m`, and the check that every tensor-parallel
group is joined by NVLink.

`nvidia-smi topo -m` prints a matrix: a header row of `GPU0 GPU1 ... NIC0 ... CPU Affinity ...`
and one row per device. Between two GPUs the cell is `NV#` (a bonded set of # NVLinks) or a PCIe
path: `PIX`, `PXB`, `PHB`, `NODE`, `SYS`. TP all-reduces every layer; over PCIe (let alone across
sockets, `SYS`) that costs a 70B model most of its decode speed, so a TP group must be NVLink
all-to-all. The seeds' procurement check: a pair showing PIX or SYS inside a TP group means the
board is not what was paid for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from inhouse.errors import SpecError
from inhouse.spec.stack import StackSpec

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV\d+$")
PCIE_LINKS = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"})


@dataclass(frozen=True, slots=True)
class Topology:
    """GPU-to-GPU links by index: `links[(a, b)]` is the matrix cell, e.g. `NV18` or `SYS`."""

    num_gpus: int
    links: dict[tuple[int, int], str]

    def link(self, a: int, b: int) -> str:
        return self.links[(a, b)]

    def is_nvlink(self, a: int, b: int) -> bool:
        return bool(_NVLINK.match(self.link(a, b)))

    def nvlink_domains(self) -> list[tuple[int, ...]]:
        """Groups of GPUs connected through NVLink (connected components)."""
        seen: set[int] = set()
        domains = []
        for start in range(self.num_gpus):
            if start in seen:
                continue
            stack, members = [start], {start}
            while stack:
                gpu = stack.pop()
                for other in range(self.num_gpus):
                    if other not in members and other != gpu and self.is_nvlink(gpu, other):
                        members.add(other)
                        stack.append(other)
            seen |= members
            domains.append(tuple(sorted(members)))
        return domains


@dataclass(frozen=True, slots=True)
class BadPair:
    """Two GPUs of one TP group whose link is not NVLink."""

    group: str
    a: int
    b: int
    link: str

    def describe(self) -> str:
        return f"{self.group}: GPU{self.a}-GPU{self.b} joined by {self.link}, not NVLink"


def parse_topology(text: str) -> Topology:
    """Parse `nvidia-smi topo -m` output; raise SpecError if there is no GPU matrix."""
    table = [_ANSI.sub("", line).split() for line in text.splitlines()]
    # The header starts GPU0 (then GPU1... or, on a one-GPU box, CPU Affinity); rows start
    # GPU0 X ...
    at = next((i for i, c in enumerate(table) if c[:1] == ["GPU0"] and c[1:2] != ["X"]), None)
    if at is None:
        raise SpecError(
            "no GPU matrix found: expected the output of `nvidia-smi topo -m` "
            "(a header row starting GPU0 GPU1 ...)"
        )
    num_gpus = sum(1 for cell in table[at] if _GPU.match(cell))
    links: dict[tuple[int, int], str] = {}
    for cells in table[at + 1 :]:
        match = _GPU.match(cells[0]) if cells else None
        if match is None:
            continue
        row = int(match.group(1))
        if len(cells) < num_gpus + 1:
            raise SpecError(f"GPU{row}: row has {len(cells) - 1} cells, expected {num_gpus}")
        for col in range(num_gpus):
            links[(row, col)] = cells[col + 1]
    missing = [f"GPU{i}" for i in range(num_gpus) if (i, i) not in links]
    if missing:
        raise SpecError(f"topology matrix lacks rows for {', '.join(missing)}")
    for a in range(num_gpus):  # a link joins both ways: else the verdict depends on the order
        for b in range(a + 1, num_gpus):
            if links[(a, b)] != links[(b, a)]:
                raise SpecError(
                    f"GPU{a}-GPU{b} is {links[(a, b)]} but GPU{b}-GPU{a} is {links[(b, a)]}: "
                    "the matrix is not symmetric, so it is not intact `nvidia-smi topo -m` "
                    "output; save it again"
                )
    return Topology(num_gpus, links)


def check_groups(topology: Topology, groups: Sequence[tuple[str, Sequence[int]]]) -> list[BadPair]:
    """Every pair inside each named group that is not NVLink-joined, in order."""
    bad = []
    for name, ids in groups:
        unknown = [i for i in ids if not 0 <= i < topology.num_gpus]
        if unknown:
            raise SpecError(
                f"{name}: GPU index {unknown[0]} is not in the topology "
                f"(GPU0..GPU{topology.num_gpus - 1})"
            )
        for i, a in enumerate(ids):
            for b in ids[i + 1 :]:
                if not topology.is_nvlink(a, b):
                    bad.append(BadPair(name, a, b, topology.link(a, b)))
    return bad


def stack_groups(stack: StackSpec) -> tuple[list[tuple[str, tuple[int, ...]]], list[str]]:
    """The TP groups a stack pins with `gpu_ids`, and notes on pools it cannot check."""
    groups = []
    notes = []
    for pool in stack.pools:
        if pool.gpu_ids:
            for index, ids in enumerate(pool.gpu_ids):
                groups.append((f"pool {pool.name} replica {index} (GPUs {_ids(ids)})", ids))
        elif pool.tp > 1:
            notes.append(f"pool {pool.name}: TP={pool.tp} without gpu_ids, not checked")
    return groups, notes


def consecutive_groups(num_gpus: int, tp: int) -> list[tuple[str, tuple[int, ...]]]:
    """GPUs 0..tp-1, tp..2tp-1, ...: how a node is usually cut into TP groups. Raises
    SpecError when not even one group fits (else a check of them would pass, checking none)."""
    if tp > num_gpus:
        raise SpecError(
            f"--tp {tp}: a TP group of {tp} GPUs does not fit the topology's {num_gpus} GPU(s)"
        )
    return [
        (
            f"TP group {start // tp} (GPUs {_ids(range(start, start + tp))})",
            tuple(range(start, start + tp)),
        )
        for start in range(0, num_gpus - tp + 1, tp)
    ]


def _ids(ids: Sequence[int] | range) -> str:
    return ",".join(map(str, ids))
