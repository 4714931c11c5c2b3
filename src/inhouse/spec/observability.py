"""The stack's `observability` section: what the rendered Prometheus, Loki, Tempo and Grafana
need to know that the pools do not say. Optional and additive to stack schema v1.

    observability:
      usd_per_hour: 15.38       # the stack's all-in cost per hour (`inhouse plan` writes it)
      log_retention_days: 90    # Loki keeps the gateway's and engines' logs this long
      trace_retention_days: 14  # Tempo keeps traces this long
      tracing:
        enabled: false          # gateway and vLLM send OTLP traces to Tempo
        sample_ratio: 0.05      # share of requests traced (parent-based)
        detailed: false         # vLLM --collect-detailed-traces=all: per-step spans, costly
"""

from __future__ import annotations

from pydantic import Field

from inhouse.spec.base import SpecModel


class TracingSpec(SpecModel):
    enabled: bool = Field(default=False, description="gateway and engines send OTLP traces")
    sample_ratio: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="share of requests traced; the seeds warn full tracing is expensive at "
        "high QPS, so the default keeps 1 in 20",
    )
    detailed: bool = Field(
        default=False,
        description="vLLM's --collect-detailed-traces=all (model-forward spans; slows steps)",
    )


class ObservabilitySpec(SpecModel):
    usd_per_hour: float | None = Field(
        default=None,
        gt=0,
        description="all-in cost of the stack per hour (hardware, power, operations); the "
        "cost dashboards divide it over the tokens served. `inhouse plan` writes the plan's",
    )
    log_retention_days: int = Field(default=90, ge=1, description="Loki retention")
    trace_retention_days: int = Field(default=14, ge=1, description="Tempo retention")
    tracing: TracingSpec = Field(default_factory=TracingSpec)
