"""Served acceptance, counted per draft position, and the alarm against what the draft should accept.

Plain arithmetic, no SGLang, torch or Prometheus (:mod:`sglang_eagle3_capture.observe.metrics` feeds it from
SGLang's scheduler and exports it). One *verify step* is one request's verify of one draft (a chain of
``steps`` tokens, or a tree ``steps`` deep); SGLang reports it as ``num_correct_drafts``, the draft tokens the
target accepted (the bonus token not counted). Definitions (docs/metrics.md), the same as ``verify``'s offline
figures and ``benchmarks/bench_e2e.py``'s served ones, so the three compare:

- ``proposed[k]``: verify steps that proposed a token at draft position ``k`` (every step, for k < steps);
- ``accepted[k]``: verify steps that accepted at least ``k + 1`` draft tokens (the token at position ``k`` and
  every one before it);
- per-position acceptance ``accepted[k] / proposed[k]``; accept length ``1 + sum(accepted) / verify steps``;
- ``histogram[j]``: verify steps that accepted exactly ``j`` draft tokens (SGLang's own
  ``spec_correct_drafts_histogram``, summed over requests).

The alarm compares position-0 acceptance over the last ``window`` verify steps with the manifest's ``expected``
figure for the running topk; it fires when it is below by more than ``margin``, once, and clears (once) when it
comes back within half the margin.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

METRICS_ENV = "SGLANG_EAGLE3_CAPTURE_METRICS"  # "0": no counters, no log line, no alarm
LOG_EVERY_ENV = "SGLANG_EAGLE3_CAPTURE_METRICS_LOG_EVERY"  # verify steps between log lines; 0: none
MARGIN_ENV = "SGLANG_EAGLE3_CAPTURE_ALARM_MARGIN"
WINDOW_ENV = "SGLANG_EAGLE3_CAPTURE_ALARM_WINDOW"
LOG_EVERY = 1000
# 0.15 below the expected figure over 200 verify steps: at an expected 0.75 that is about 4.9 standard deviations of
# a 200-step mean (sqrt(0.75 * 0.25 / 200) = 0.031), so a healthy server does not raise it by chance, while the case
# behind this package (74.7% trained, 34.1% served) raises it at the 200th verify step.
MARGIN = 0.15
WINDOW = 200


def _setting(environ: Mapping[str, str], name: str, default: float, kind: type, lo: float, hi: float
             ) -> tuple[float, str | None]:
    """``name`` from ``environ`` (``default`` when unset); a value that does not read is the default and a
    problem to log: metadata never stops a server."""
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default, None
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not lo <= value <= hi:
        return default, f"{name}={raw!r} is not a {kind.__name__} in [{lo}, {hi}]; using {default}"
    return value, None


@dataclass(frozen=True)
class Settings:
    """The counting and alarm settings of one server, read once from its environment."""

    enabled: bool = True
    log_every: int = LOG_EVERY
    margin: float = MARGIN
    window: int = WINDOW
    problems: tuple[str, ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        environ = os.environ if environ is None else environ
        enabled = environ.get(METRICS_ENV, "1").strip() not in ("0", "false", "no", "off")
        log_every, p1 = _setting(environ, LOG_EVERY_ENV, LOG_EVERY, int, 0, 10**9)
        margin, p2 = _setting(environ, MARGIN_ENV, MARGIN, float, 0.0, 1.0)
        window, p3 = _setting(environ, WINDOW_ENV, WINDOW, int, 1, 10**7)
        return cls(enabled, int(log_every), float(margin), int(window), tuple(p for p in (p1, p2, p3) if p))


@dataclass
class Tally:
    """Counts of one server's verify steps (see the module doc) for a draft of ``steps`` positions. Only the
    histogram is kept (one add per verify step); ``proposed`` and ``accepted`` follow from it."""

    steps: int
    histogram: list[int] = field(init=False)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"a draft has at least one position, got steps={self.steps}")
        self.histogram = [0] * (self.steps + 1)

    @property
    def verify_steps(self) -> int:
        return sum(self.histogram)

    @property
    def proposed(self) -> list[int]:
        return [self.verify_steps] * self.steps

    @property
    def accepted(self) -> list[int]:
        return [sum(self.histogram[k + 1:]) for k in range(self.steps)]

    def record(self, num_correct_drafts: int) -> None:
        """One verify step that accepted ``num_correct_drafts`` draft tokens (clamped to the draft's positions)."""
        n = num_correct_drafts
        self.histogram[n if 0 <= n <= self.steps else (0 if n < 0 else self.steps)] += 1

    def per_position(self) -> list[float | None]:
        n = self.verify_steps
        return [a / n if n else None for a in self.accepted]

    def accept_length(self) -> float | None:
        n = self.verify_steps
        return 1 + sum(self.accepted) / n if n else None

    def since(self, earlier: "Tally") -> "Tally":
        """The counts added after ``earlier`` (a copy taken with :meth:`copy`)."""
        out = Tally(self.steps)
        out.histogram = [a - b for a, b in zip(self.histogram, earlier.histogram)]
        return out

    def copy(self) -> "Tally":
        out = Tally(self.steps)
        out.histogram = list(self.histogram)
        return out

    def line(self) -> str:
        pos = " ".join("-" if p is None else f"{p:.3f}" for p in self.per_position())
        length = self.accept_length()
        return (f"{self.verify_steps} verify steps: per-position acceptance {pos}; accept length "
                f"{'-' if length is None else f'{length:.3f}'}; accepted-drafts histogram {self.histogram}")


@dataclass(frozen=True)
class AlarmEvent:
    """The alarm changing state: ``firing`` True when it fires, False when it clears."""

    firing: bool
    observed: float
    expected: float
    margin: float
    window: int


class Alarm:
    """Position-0 acceptance over the last ``window`` verify steps against ``expected`` (module doc)."""

    def __init__(self, expected: float, *, margin: float = MARGIN, window: int = WINDOW) -> None:
        self.expected, self.margin, self.window = expected, margin, window
        self._recent: deque[bool] = deque(maxlen=window)
        self._hits = 0
        self.firing = False

    @property
    def observed(self) -> float | None:
        return self._hits / len(self._recent) if len(self._recent) == self.window else None

    def observe(self, accepted_first: bool) -> AlarmEvent | None:
        """One verify step (whether it accepted the first draft token); an event when the alarm changes state."""
        recent = self._recent
        full = len(recent) == self.window
        if full:
            self._hits -= recent[0]
        recent.append(accepted_first)
        self._hits += accepted_first
        if not full and len(recent) < self.window:
            return None
        rate = self._hits / self.window
        if not self.firing:
            if rate >= self.expected - self.margin:
                return None
            self.firing = True
        elif rate >= self.expected - self.margin / 2:
            self.firing = False
        else:
            return None
        return AlarmEvent(self.firing, rate, self.expected, self.margin, self.window)


CAUSES = ("the fc is fed other hidden states than the draft was trained on (a manifest whose layer_ids are not the "
          "training ids, or a draft served without the plugin)",
          "the speculative settings SGLang runs differ from the ones the figures were measured for (see the "
          "setup report)",
          "the draft and target vocabularies or tokenizers differ (d2t)",
          "the traffic differs from the training data (chat template, language, sampling temperature)")


def alarm_message(event: AlarmEvent, draft: str, target: str) -> str:
    """The WARNING for ``event`` (one line), naming the likely causes and the doctor command to run."""
    if not event.firing:
        return (f"acceptance recovered: position-0 acceptance {event.observed:.3f} over the last {event.window} verify "
                f"steps is within {event.margin / 2:.2f} of the expected {event.expected:.3f}")
    return (f"ACCEPTANCE ALARM: position-0 acceptance {event.observed:.3f} over the last {event.window} verify steps "
            f"is more than {event.margin:.2f} below the {event.expected:.3f} the manifest's 'expected' block says "
            f"this draft reaches offline. Likely causes: {'; '.join(CAUSES)}. Run `sglang-eagle3-capture inspect "
            f"{draft} --target {target} -- <your launch_server arguments>` and `sglang-eagle3-capture verify "
            f"{draft} --target {target} --data SAMPLES`")
