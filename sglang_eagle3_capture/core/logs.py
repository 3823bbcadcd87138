"""The package's loggers: each log line escaped as :func:`~.errors.shown` escapes it, so a value users control (a
path, an environment variable) cannot forge a line or repaint the terminal (docs/threat-model.md)."""

from __future__ import annotations

import logging

from .errors import shown


def _escape(record: logging.LogRecord) -> bool:
    """The logging filter: formats a record's message with its arguments and escapes the result (no arguments left)."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a call site's format error: logging reports it as it would without us
        return True
    if record.args or not message.isprintable():
        record.msg, record.args = shown(message), ()
    return True


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the escaping filter: the one way the package makes a logger."""
    logger = logging.getLogger(name)
    if _escape not in logger.filters:
        logger.addFilter(_escape)
    return logger
