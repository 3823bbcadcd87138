"""The plugin's environment switches, declared once in :data:`SWITCHES` and read by one parser (docs/how-it-works.md,
"Environment switches").
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Mapping

from .errors import DeploymentError, brief
from .logs import get_logger

logger = get_logger(__name__)

FLAG, INT, FLOAT, PATH = "flag", "int", "float", "path"
ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class Switch:
    """One environment variable; ``guards``: a value that does not read is refused, not defaulted."""

    name: str
    kind: str
    default: Any
    what: str
    guards: bool = False
    low: float | None = None  # bounds of a number, inclusive (None: unbounded)
    high: float | None = None

    def expects(self) -> str:
        if self.kind in (FLAG, PATH):
            return f"{'/'.join(ON)} or {'/'.join(OFF)}" if self.kind == FLAG else "a path"
        kind = "an integer" if self.kind == INT else "a number"
        low = self._number(self.low)
        return f"{kind} >= {low}" if self.high is None else f"{kind} in [{low}, {self._number(self.high)}]"

    def shown_default(self) -> str:
        if self.kind == FLAG:
            return "on" if self.default else "off"
        if self.kind == PATH:
            return "unset" if self.default is None else str(self.default)
        return self._number(self.default)

    def _number(self, x: float) -> str:
        return str(int(x)) if self.kind == INT else f"{x:g}"


STRICT = Switch("SGLANG_EAGLE3_CAPTURE_STRICT", FLAG, False, "strict mode: refuse to start on a rewritten "
                "speculative setting or a contradiction (docs/setup-report.md)", guards=True)
SELFCHECK = Switch("SGLANG_EAGLE3_CAPTURE_SELFCHECK", FLAG, True, "the first-batch self-check (docs/self-check.md)",
                   guards=True)
METRICS = Switch("SGLANG_EAGLE3_CAPTURE_METRICS", FLAG, True, "per-position acceptance counting, its log line and the "
                 "alarm (docs/metrics.md)")
METRICS_LOG_EVERY = Switch("SGLANG_EAGLE3_CAPTURE_METRICS_LOG_EVERY", INT, 1000, "verify steps between acceptance "
                           "log lines; 0: none", low=0, high=10**9)
# 0.15 below the expected figure over 200 verify steps: at an expected 0.75 that is about 4.9 standard deviations of
# a 200-step mean (sqrt(0.75 * 0.25 / 200) = 0.031), so a healthy server does not raise it by chance, while the case
# behind this package (74.7% trained, 34.1% served) raises it at the 200th verify step.
ALARM_MARGIN = Switch("SGLANG_EAGLE3_CAPTURE_ALARM_MARGIN", FLOAT, 0.15, "how far below the expected position-0 "
                      "acceptance the alarm fires", low=0.0, high=1.0)
ALARM_WINDOW = Switch("SGLANG_EAGLE3_CAPTURE_ALARM_WINDOW", INT, 200, "verify steps the alarm averages over", low=1,
                      high=10**7)
DUMP = Switch("SGLANG_EAGLE3_CAPTURE_DUMP", PATH, None, "the capture dump's directory (prompts and hidden states; "
              "docs/how-it-works.md)")
DUMP_MAX = Switch("SGLANG_EAGLE3_CAPTURE_DUMP_MAX", INT, 4, "batches the dump writes per process", low=1)
DUMP_MAX_BYTES = Switch("SGLANG_EAGLE3_CAPTURE_DUMP_MAX_BYTES", INT, 64 * 1024 * 1024, "bytes of tensors the dump "
                        "writes per process", low=1)
REPORT = Switch("SGLANG_EAGLE3_CAPTURE_REPORT", PATH, None, "where the setup report's JSON goes (default: report/ "
                "in the dump directory)")

SWITCHES = (STRICT, SELFCHECK, METRICS, METRICS_LOG_EVERY, ALARM_MARGIN, ALARM_WINDOW, DUMP, DUMP_MAX, DUMP_MAX_BYTES,
            REPORT)

_UNREAD = object()


def _parsed(switch: Switch, raw: str) -> Any:
    text = raw.strip()
    if switch.kind == FLAG:
        word = text.lower()
        return True if word in ON else False if word in OFF else _UNREAD
    if switch.kind == PATH:
        return text if text and "\x00" not in text else _UNREAD
    try:
        value = int(text) if switch.kind == INT else float(text)
    except ValueError:
        return _UNREAD
    if not math.isfinite(value) or value < switch.low or (switch.high is not None and value > switch.high):
        return _UNREAD
    return value


def parse(switch: Switch, environ: Mapping[str, str] | None = None) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(default, the WARNING's text)`` for a value that does not read (a
    :class:`~.errors.DeploymentError` when the switch guards a guarantee). Logs nothing."""
    raw = (os.environ if environ is None else environ).get(switch.name)
    if not raw:
        return switch.default, None
    value = _parsed(switch, raw)
    if value is not _UNREAD:
        return value, None
    said = f"{switch.name}={brief(raw, 80)} is not {switch.expects()}"
    if switch.guards:
        raise DeploymentError(None, switch.name, f"{said}, and the switch guards a guarantee ({switch.what}), so a "
                              "value that does not read is refused rather than guessed", f"set {switch.name} to 1 or 0 "
                              f"(default: {switch.shown_default()}), or unset it")
    return switch.default, (f"{said}; using the default ({switch.shown_default()}) for {switch.what}; fix: set it to "
                            f"{switch.expects()}, or unset it")


_WARNED: set[str] = set()


def warn(problem: str) -> None:
    """Log ``problem`` as one WARNING, once per process."""
    if problem not in _WARNED:
        _WARNED.add(problem)
        logger.warning("eagle3-capture: %s", problem)


def read(switch: Switch, environ: Mapping[str, str] | None = None) -> Any:
    """The value of ``switch`` (:func:`parse`), logging its problem once (:func:`warn`)."""
    value, problem = parse(switch, environ)
    if problem is not None:
        warn(problem)
    return value


def check_guards(environ: Mapping[str, str] | None = None) -> None:
    """Raise when a switch that guards a guarantee holds a value that does not read; called at startup."""
    for switch in SWITCHES:
        if switch.guards:
            parse(switch, environ)
