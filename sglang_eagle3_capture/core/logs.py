"""The package's loggers: every log line the plugin emits is one line, with what users control escaped.

Log lines carry values users control (a draft path, an environment variable's value); one holding a newline or a
terminal escape must not forge a line (``...\\neagle3-capture self-check passed``) nor repaint the terminal. The
filter of :func:`get_logger` escapes each rendered message as :func:`~.errors.shown` does, so no call site has to
remember it; a traceback from ``exc_info`` is left as Python formats it.
"""

from __future__ import annotations

import logging

from .errors import shown

__all__ = ["EscapeFilter", "get_logger"]


class EscapeFilter(logging.Filter):
    """Formats a record's message with its arguments and escapes the result (the record then has no arguments)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a call site's format error: logging reports it as it would without us
            return True
        if record.args or not message.isprintable():
            record.msg, record.args = shown(message), ()
        return True


_FILTER = EscapeFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the escaping filter (module doc); the one way the package makes a logger."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
