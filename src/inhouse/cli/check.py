"""Pre-flight checks of the hardware a stack will run on.

`inhouse check topology FILE` reads `nvidia-smi topo -m` output and fails, naming the pair, when
a tensor-parallel group spans GPUs not joined by NVLink. Groups come from the stack's `gpu_ids`
(`--stack`), from `--group 0,1,2,3` (repeatable) or from `--tp N` (GPUs cut into consecutive
blocks of N). With none, it prints the NVLink domains it found. See docs/check.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inhouse.errors import SpecError
from inhouse.spec.load import load_stack
from inhouse.topology import check_groups, consecutive_groups, parse_topology, stack_groups

COMMAND = "check"
HELP = "pre-flight checks: `check topology FILE` (TP groups must be NVLink-joined)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="check", metavar="CHECK", required=True)
    topo = sub.add_parser(
        "topology", help="TP groups against `nvidia-smi topo -m` output", description=__doc__
    )
    topo.add_argument("file", type=Path, help="saved `nvidia-smi topo -m` output ('-': stdin)")
    topo.add_argument("--stack", type=Path, help="check every pool's gpu_ids groups")
    topo.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="IDS",
        help="a TP group as comma-separated GPU indices (repeatable)",
    )
    topo.add_argument("--tp", type=int, help="check consecutive groups of this size")


def _parse_ids(text: str) -> tuple[int, ...]:
    try:
        ids = tuple(int(part) for part in text.split(","))
    except ValueError as exc:
        raise SpecError(f"--group {text!r}: expected GPU indices like 0,1,2,3") from exc
    if len(set(ids)) != len(ids):
        raise SpecError(f"--group {text!r}: a GPU appears twice")
    return ids


def _read(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror}") from exc


def run(args: argparse.Namespace) -> int:
    topology = parse_topology(_read(args.file))
    groups = [(f"group {text}", _parse_ids(text)) for text in args.group]
    if args.tp is not None:
        if args.tp < 1:
            raise SpecError(f"--tp must be a positive integer, got {args.tp}")
        groups += consecutive_groups(topology.num_gpus, args.tp)
    if args.stack is not None:
        stack_found, notes = stack_groups(load_stack(args.stack))
        groups += stack_found
        for note in notes:
            print(f"note: {note}")
    domains = " ".join("[" + ",".join(map(str, d)) + "]" for d in topology.nvlink_domains())
    print(f"{topology.num_gpus} GPUs; NVLink domains: {domains}")
    if not groups:
        return 0
    bad = check_groups(topology, groups)
    failed = {pair.group for pair in bad}
    for name, _ in groups:
        print(f"{'FAIL' if name in failed else 'ok':<4}  {name}")
    for pair in bad:
        print(f"  {pair.describe()}")
    if bad:
        print(
            "A TP group must be NVLink all-to-all: fix gpu_ids, or escalate to the vendor if "
            "the board should have NVLink here."
        )
        return 1
    return 0
