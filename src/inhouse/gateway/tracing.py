"""Optional OTLP traces: one span per request when the OpenTelemetry SDK and its OTLP/HTTP
exporter are installed and an endpoint is configured; nothing otherwise (never required)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("inhouse.gateway")


def setup_tracing(endpoint: str | None, service_name: str = "inhouse-gateway") -> Any | None:
    """A tracer, or None when tracing is off or the packages are missing."""
    if not endpoint:
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "otlp_endpoint is set but opentelemetry-sdk / opentelemetry-exporter-otlp-proto-http "
            "are not installed: tracing is off"
        )
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("inhouse.gateway")


def record_span(tracer: Any | None, record: dict[str, Any], start_s: float, end_s: float) -> None:
    """A finished request as a span (times in seconds since the epoch)."""
    if tracer is None:
        return
    span = tracer.start_span("gateway.request", start_time=int(start_s * 1e9))
    for key, value in record.items():
        if value is not None and key != "prompt":
            span.set_attribute(f"inhouse.{key}", value)
    span.end(end_time=int(end_s * 1e9))
