"""Structured logs: one line per event, ``ts level event key=value ...`` (or JSON with WOOLY_LOG_JSON=1)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from proto import settings

_logger = logging.getLogger("gpud")


class _Formatter(logging.Formatter):
    def __init__(self, as_json: bool) -> None:
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {})
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        if self.as_json:
            return json.dumps({"ts": ts, "level": record.levelname.lower(), "event": record.getMessage(), **fields})
        kv = " ".join(f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}" for k, v in fields.items())
        return f"{ts} {record.levelname.lower():5s} {record.getMessage()} {kv}".rstrip()


def setup(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(settings.gpud().log_json))
    _logger.handlers[:] = [handler]
    _logger.setLevel(level.upper())
    _logger.propagate = False


def event(name: str, level: int = logging.INFO, **fields: Any) -> None:
    if _logger.isEnabledFor(level):
        _logger.log(level, name, extra={"fields": fields})


def debug(name: str, **fields: Any) -> None:
    event(name, logging.DEBUG, **fields)


def warning(name: str, **fields: Any) -> None:
    event(name, logging.WARNING, **fields)
