"""Serve one simulated engine replica over HTTP, speaking vLLM's OpenAI-compatible API.

    inhouse engine --model meta-llama/Llama-3.1-8B-Instruct --gpu h100_sxm --port 8100

Timing comes from the engine core and the step-time model for the model, GPU, TP and
quantization given, in wall-clock time. The knob flags are generated from the stack file's knob
type (`inhouse.launch.knob_flags`) and carry vLLM's names. With `--weights-dir` (and
`--public-key`), the signed weights are verified first and the engine refuses to start, naming
the file, when they were altered. See docs/engine.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from inhouse.errors import InhouseError
from inhouse.launch.knob_flags import add_knob_arguments, knobs_from_args
from inhouse.server.serve import serve_engine
from inhouse.server.state import EngineOptions
from inhouse.server.tools import add_tool_arguments, tool_options

COMMAND = "engine"
HELP = "serve one simulated engine replica with vLLM's HTTP API and metrics"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="catalog name, HF id or local model dir")
    parser.add_argument("--served-model-name", nargs="+", default=None, metavar="NAME")
    parser.add_argument("--gpu", default="h100_sxm")
    parser.add_argument("--tp", "--tensor-parallel-size", type=int, default=1, dest="tp")
    parser.add_argument("--quant", "--quantization", default="bf16", dest="quant")
    parser.add_argument("--backend", default="vllm", help="step-time constants: vllm or sglang")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--lora-modules", nargs="+", default=(), metavar="NAME[=PATH]")
    parser.add_argument("--max-num-queued-reqs", type=int, help="503 when this many wait")
    parser.add_argument(
        "--eos-length-dist",
        default=None,
        help="none (output = max_tokens), exp:MEAN, uniform:LO:HI or lognormal:MEDIAN:SIGMA",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply every step time (tests and demos; 1 = real time)",
    )
    parser.add_argument(
        "--lag-tolerance-ms",
        type=float,
        default=5.0,
        help="lateness per step above which the host is reported as lagging",
    )
    parser.add_argument(
        "--catchup-window-ms",
        type=float,
        default=200.0,
        help="how far behind the simulated clock the loop may fall and still catch up",
    )
    parser.add_argument("--admin-port", type=int, help="open the fault-injection port")
    parser.add_argument("--admin-host", default="127.0.0.1")
    parser.add_argument(
        "--weights-dir",
        type=Path,
        help="signed weights to verify before loading; refuse to start if altered",
    )
    parser.add_argument("--public-key", type=Path, help="key that signed --weights-dir")
    parser.add_argument(
        "--certificate-chain",
        type=Path,
        nargs="+",
        default=(),
        metavar="CA",
        help="CA certificates that issued the signer's, instead of --public-key",
    )
    parser.add_argument(
        "--allow-expired-certificate",
        action="store_true",
        help="accept a certificate past its expiry (default: refuse it)",
    )
    parser.add_argument("--signature", type=Path, help="default: WEIGHTS_DIR.sig")
    parser.add_argument("--log-prompts", action="store_true", help="log prompt text")
    parser.add_argument("--access-log", action="store_true", help="log every HTTP request")
    add_knob_arguments(parser)
    add_tool_arguments(parser)


def options_from_args(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(
        model=args.model,
        served_model_names=tuple(args.served_model_name or ()),
        gpu=args.gpu,
        tp=args.tp,
        quant=args.quant,
        backend=args.backend,
        knobs=knobs_from_args(args),
        lora_modules=tuple(args.lora_modules),
        time_scale=args.time_scale,
        eos_length_dist=args.eos_length_dist,
        seed=args.seed,
        max_num_queued_reqs=args.max_num_queued_reqs,
        log_prompts=args.log_prompts,
        lag_tolerance_s=args.lag_tolerance_ms / 1000.0,
        catchup_window_s=args.catchup_window_ms / 1000.0,
        tools=tool_options(args),
    )


def verify_weights(args: argparse.Namespace) -> bool:
    """Verify --weights-dir before anything loads; False (and the reason, naming the file, on
    stderr) when it does not match its signature."""
    if args.weights_dir is None:
        if (
            args.public_key
            or args.certificate_chain
            or args.signature
            or args.allow_expired_certificate
        ):
            raise InhouseError(
                "--public-key, --certificate-chain, --allow-expired-certificate and --signature "
                "need --weights-dir"
            )
        return True
    from inhouse.weights.messages import describe_failure, describe_success
    from inhouse.weights.trust import Trust
    from inhouse.weights.verify import verify_model

    trust = Trust.from_args(
        args.public_key, tuple(args.certificate_chain), args.allow_expired_certificate
    )
    result = verify_model(args.weights_dir, trust, args.signature)
    if not result.ok:
        print(f"inhouse engine: refusing to start: {describe_failure(result)}", file=sys.stderr)
        return False
    logging.getLogger("inhouse.engine").info("%s", describe_success(result))
    return True


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s %(message)s")
    if not verify_weights(args):
        return 1
    options = options_from_args(args)
    coroutine = serve_engine(
        options,
        args.host,
        args.port,
        admin_host=args.admin_host,
        admin_port=args.admin_port,
        access_log=args.access_log,
    )
    return asyncio.run(coroutine)


def main(argv: list[str] | None = None) -> int:
    """`python -m inhouse.cli.engine ...`: the same command without the CLI's discovery of
    sibling commands (how `inhouse up` starts its engines)."""
    parser = argparse.ArgumentParser(prog="inhouse engine", description=__doc__)
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except InhouseError as exc:
        print(f"inhouse engine: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
