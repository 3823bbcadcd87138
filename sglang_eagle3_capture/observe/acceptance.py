"""Served acceptance per draft position and the alarm against the manifest's figures (docs/metrics.md), fed by
:mod:`.metrics` on SGLang and from vLLM's own counters (:data:`VLLM_WRAPPERS`); imports no engine, torch, Prometheus."""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

from ..core import switches
from ..core.errors import shown
from ..core.logs import get_logger
from ..core.manifest import find_manifest

METRICS_ENV = switches.METRICS.name  # off: no counters, no log line, no alarm
LOG_EVERY_ENV = switches.METRICS_LOG_EVERY.name  # verify steps between log lines; 0: none
MARGIN_ENV = switches.ALARM_MARGIN.name
WINDOW_ENV = switches.ALARM_WINDOW.name
LOG_EVERY = switches.METRICS_LOG_EVERY.default
MARGIN = switches.ALARM_MARGIN.default  # why 0.15 over 200 steps: core/switches.py
WINDOW = switches.ALARM_WINDOW.default
logger = get_logger(__name__)


@dataclass(frozen=True)
class Settings:
    enabled: bool = True
    log_every: int = LOG_EVERY
    margin: float = MARGIN
    window: int = WINDOW
    problems: tuple[str, ...] = ()  # values that did not read (each then its default); the caller logs them

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        read = [switches.parse(s, environ) for s in (switches.METRICS, switches.METRICS_LOG_EVERY,
                                                      switches.ALARM_MARGIN, switches.ALARM_WINDOW)]
        (enabled, log_every, margin, window), problems = zip(*read)
        return cls(enabled, int(log_every), float(margin), int(window), tuple(p for p in problems if p))


@dataclass
class Tally:
    """Verify steps of a ``steps``-position draft, as the accepted-drafts histogram only (one add per step)."""

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
        self.histogram[min(max(num_correct_drafts, 0), self.steps)] += 1  # clamped to the draft's positions

    def per_position(self) -> list[float | None]:
        n = self.verify_steps
        return [a / n if n else None for a in self.accepted]

    def accept_length(self) -> float | None:
        n = self.verify_steps
        return 1 + sum(self.accepted) / n if n else None

    def since(self, earlier: "Tally") -> "Tally":
        out = Tally(self.steps)
        out.histogram = [a - b for a, b in zip(self.histogram, earlier.histogram)]
        return out

    def copy(self) -> "Tally":
        return self.since(Tally(self.steps))

    def line(self) -> str:
        pos = " ".join("-" if p is None else f"{p:.3f}" for p in self.per_position())
        length = self.accept_length()
        return (f"{self.verify_steps} verify steps: per-position acceptance {pos}; accept length "
                f"{'-' if length is None else f'{length:.3f}'}; accepted-drafts histogram {self.histogram}")


class AlarmEvent(NamedTuple):
    firing: bool  # True: it fires, False: it clears
    observed: float
    expected: float
    margin: float
    window: int


class Alarm:
    """Position-0 acceptance over the last ``window`` verify steps against ``expected``."""

    def __init__(self, expected: float, *, margin: float = MARGIN, window: int = WINDOW) -> None:
        self.expected, self.margin, self.window = expected, margin, window
        self._recent: deque[bool] = deque(maxlen=window)
        self._hits = 0
        self.firing = False

    @property
    def observed(self) -> float | None:
        return self._hits / len(self._recent) if len(self._recent) == self.window else None

    def observe(self, accepted_first: bool) -> AlarmEvent | None:
        """One verify step; an event when the alarm changes state."""
        recent = self._recent
        if len(recent) == self.window:
            self._hits -= recent[0]
        recent.append(accepted_first)
        self._hits += accepted_first
        if len(recent) < self.window:
            return None
        rate = self._hits / self.window
        # fires below expected - margin; once firing, clears at expected - margin / 2 or above
        below = rate < self.expected - (self.margin / 2 if self.firing else self.margin)
        if below == self.firing:  # no change of state
            return None
        self.firing = not self.firing
        return AlarmEvent(self.firing, rate, self.expected, self.margin, self.window)


def arm(draft: str, setting: tuple[int, int, int], settings: Settings,
        how: str = "") -> tuple[list[float] | None, Alarm | None]:
    """The manifest's figures for ``setting`` (steps, topk, draft tokens as served) and the alarm they arm; None and
    one log line when there are none (a WARNING when an ``expected`` block is there but does not hold)."""
    named, why = ",".join(map(str, setting)), "the draft has no manifest"
    try:
        manifest = find_manifest(draft)
    except Exception as e:  # noqa: BLE001 - the capture side refuses a bad manifest; here it only means no alarm
        manifest, why = None, f"the manifest does not read ({e})"
    figures, why = (None, why) if manifest is None else manifest.expected_acceptance(*setting)
    if figures is not None:
        logger.info("eagle3-capture: acceptance alarm armed: position-0 acceptance expected %.3f (setting %s: steps, "
                    "topk, draft tokens as served, from the manifest's 'expected' block%s), margin %.2f over %d "
                    "verify steps", figures[0], named, how, settings.margin, settings.window)
        return figures, Alarm(figures[0], margin=settings.margin, window=settings.window)
    if manifest is not None and manifest.expected is not None:  # figures that do not hold: said loudly, not refused
        logger.warning("eagle3-capture: no acceptance alarm for setting %s: %s", named, shown(why or ""))
    else:
        logger.info("eagle3-capture: no acceptance alarm: %s; write the figures with `sglang-eagle3-capture verify "
                    "DRAFT --data SAMPLES --write-expected`", why)
    return None, None


CAUSES = ("the fc is fed other hidden states than the draft was trained on (a manifest whose layer_ids are not the "
          "training ids, or a draft served without the plugin)",
          "the speculative settings SGLang runs differ from the ones the figures were measured for (see the "
          "setup report)",
          "the draft and target vocabularies or tokenizers differ (d2t)",
          "the traffic differs from the training data (chat template, language, sampling temperature)")


def alarm_message(event: AlarmEvent, draft: str, target: str) -> str:
    if not event.firing:
        return (f"acceptance recovered: position-0 acceptance {event.observed:.3f} over the last {event.window} verify "
                f"steps is within {event.margin / 2:.2f} of the expected {event.expected:.3f}")
    return (f"ACCEPTANCE ALARM: position-0 acceptance {event.observed:.3f} over the last {event.window} verify steps "
            f"is more than {event.margin:.2f} below the {event.expected:.3f} the manifest's 'expected' block says "
            f"this draft reaches offline. Likely causes: {'; '.join(CAUSES)}. Run `sglang-eagle3-capture inspect "
            f"{draft} --target {target} -- <your launch_server arguments>` and `sglang-eagle3-capture verify "
            f"{draft} --target {target} --data SAMPLES`")


def log_event(event: AlarmEvent | None, draft: str, target: str) -> None:
    if event is not None:
        (logger.warning if event.firing else logger.info)("eagle3-capture: %s", alarm_message(event, draft, target))


# --- vLLM: wraps SpecDecodingProm (seams vllm.metrics.init/observe) for the chain vLLM runs, topk 1 ----------------

VLLM_ALARM = "_eagle3_capture_alarm"  # on the SpecDecodingProm: (Alarm, draft, target), or None


def _vllm_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self, speculative_config, *args, **kwargs):
        original(self, speculative_config, *args, **kwargs)
        setattr(self, VLLM_ALARM, None)
        try:
            spec, settings = speculative_config, Settings.from_environ()
            if spec is not None and getattr(spec, "method", None) == "eagle3" and settings.enabled:
                draft = str(getattr(getattr(spec, "draft_model_config", None), "model", None) or "DRAFT")
                target = str(getattr(getattr(spec, "target_model_config", None), "model", None) or "TARGET")
                steps = int(spec.num_speculative_tokens)
                _, alarm = arm(draft, (steps, 1, steps + 1), settings, ", read from vLLM's spec-decode counters")
                setattr(self, VLLM_ALARM, None if alarm is None else (alarm, draft, target))
        except Exception as e:  # noqa: BLE001 - metrics never stop a server
            logger.warning("eagle3-capture: no acceptance alarm: %s", e)

    return __init__


def _vllm_observe(original: Any) -> Any:
    @functools.wraps(original)
    def observe_step(self, spec_decoding_stats, *args, **kwargs):
        original(self, spec_decoding_stats, *args, **kwargs)
        armed = getattr(self, VLLM_ALARM, None)
        per_pos = getattr(spec_decoding_stats, "num_accepted_tokens_per_pos", None)
        if armed is not None and per_pos:  # num_drafts verify steps, per_pos[0] of them accepting the first token
            alarm, draft, target = armed
            hits = int(per_pos[0])
            for hit in (True,) * hits + (False,) * (int(spec_decoding_stats.num_drafts) - hits):
                log_event(alarm.observe(hit), draft, target)

    return observe_step


VLLM_WRAPPERS = {"vllm.metrics.init": _vllm_init, "vllm.metrics.observe": _vllm_observe}
