"""Structured logs: one JSON object per line on stderr, request records with their fields.

Prompts never appear unless an operator turns them on (`--log-prompts` or `log.prompts`);
the request record carries ids, tenant, model, pool, replica, status, tokens and timings.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def setup_logging(level: str = "info", access: bool = True) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    # The HTTP/1.1 server under the gateway (`inhouse.http1`) logs into the same stream.
    for name in ("inhouse.gateway", "inhouse.http1"):
        root = logging.getLogger(name)
        root.handlers[:] = [handler]
        root.setLevel(level.upper())
        root.propagate = False
    logging.getLogger("inhouse.gateway.access").disabled = not access
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.WARNING)
        logger.propagate = False
