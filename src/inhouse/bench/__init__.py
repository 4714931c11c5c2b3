"""`inhouse bench`: SLO benchmarks against OpenAI-compatible servers and the fleet simulator.

See docs/bench.md. Metrics follow `vllm bench serve` (`metrics`); the HTTP client (`http`) and
senders (`sender`) keep client overhead low and measured (`health`).
"""

from inhouse.bench.config import BenchSpec, build_workload, parse_slo
from inhouse.bench.metrics import Outcome, RequestResult, stats_ms, summarize
from inhouse.bench.schedule import vllm_arrival_offsets

__all__ = [
    "BenchSpec",
    "Outcome",
    "RequestResult",
    "build_workload",
    "parse_slo",
    "stats_ms",
    "summarize",
    "vllm_arrival_offsets",
]
