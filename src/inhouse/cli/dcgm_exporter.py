"""Serve a dcgm-exporter-compatible `/metrics` for simulated GPUs, with fault injection.

    inhouse dcgm-exporter --gpu h100_sxm --num-gpus 8 --port 9400 --admin-port 9401 \\
        --replica chat-0=0,1,2,3@http://127.0.0.1:8101 --replica chat-1=4,5,6,7@http://127.0.0.1:8102

DCGM's field names and dcgm-exporter's labels, so the rendered GPU alerts and dashboards read it
as they read the real exporter; load follows each replica's engine. See docs/dcgm-exporter.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket

from inhouse.render.layout import nvml_name
from inhouse.server.dcgm_exporter import DcgmExporter, parse_replica, serve_dcgm
from inhouse.spec.catalog import get_gpu

COMMAND = "dcgm-exporter"
HELP = "serve DCGM-exporter metrics for simulated GPUs, with fault injection (drills, tests)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu", default="h100_sxm", help="catalog GPU name")
    parser.add_argument("--num-gpus", type=int, default=8)
    parser.add_argument("--hostname", default=socket.gethostname(), help="the Hostname label")
    parser.add_argument("--namespace", default="default", help="the namespace label of pods")
    parser.add_argument(
        "--replica",
        action="append",
        default=[],
        metavar="NAME=GPUS[@URL]",
        help="a replica holding GPUs (its name is their pod label; its engine drives their load)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400, help="dcgm-exporter's default port")
    parser.add_argument("--admin-port", type=int, help="open the fault-injection port")
    parser.add_argument("--admin-host", default="127.0.0.1")


def build_exporter(args: argparse.Namespace) -> DcgmExporter:
    spec = get_gpu(args.gpu)
    return DcgmExporter(
        num_gpus=args.num_gpus,
        model_name=nvml_name(args.gpu),
        hbm_mib=int(spec.hbm_bytes / 2**20),
        power_limit_w=spec.power_w,
        hostname=args.hostname,
        replicas=tuple(parse_replica(r) for r in args.replica),
        namespace=args.namespace,
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s %(message)s")
    exporter = build_exporter(args)
    return asyncio.run(serve_dcgm(exporter, args.host, args.port, args.admin_host, args.admin_port))
