"""What a component logged during a block: its messages, whatever its logging setup (the
gateway's loggers may not propagate to the root, where pytest's caplog listens)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


class _Records(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def logged(name: str = "inhouse.gateway", level: int = logging.INFO) -> Iterator[list[str]]:
    """The messages logger `name` (and its children) emits at `level` or above inside the
    block; the logger's own level is lowered to `level` meanwhile."""
    handler = _Records(level)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    before = logger.level
    if before == logging.NOTSET or before > level:
        logger.setLevel(level)
    try:
        yield handler.messages
    finally:
        logger.setLevel(before)
        logger.removeHandler(handler)
