"""Per-position acceptance on SGLang's ``/metrics``, a log line every N verify steps, and the acceptance alarm
(docs/metrics.md: names, labels, seams, cost): one integer add per verify step on the scheduler thread, a daemon
thread moves the deltas into Prometheus; a failure logs one WARNING and stops counting, never raises."""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any

from ..core import releases, seams, switches
from ..core.errors import shown
from ..core.launch import read_launch
from ..core.logs import get_logger
from ..core.sglang.runtime import draft_model_path
from . import acceptance
from .acceptance import Alarm, Settings, Tally

logger = get_logger(__name__)

PREFIX = "sglang_eagle3_capture:"
OWN_LABELS = ("position", "accepted_drafts")  # the labels this module adds to SGLang's
FLUSH_SECONDS = 0.5
_LOCK = threading.Lock()
_COUNTER: "_Counter | None" = None  # this process's scheduler (one per process), when it counts


class _Exporter:
    """The Prometheus series (the accepted-drafts histogram as one counter per value), each child resolved once."""

    def __init__(self, labels: dict, steps: int, expected: list[float] | None) -> None:
        from prometheus_client import Counter, Gauge  # after SGLang set PROMETHEUS_MULTIPROC_DIR

        base = {k: str(v) for k, v in labels.items() if k not in OWN_LABELS}  # _after_init warned once

        def series(kind: Any, name: str, doc: str, own: str | None = None, n: int = 0, **kw: Any) -> Any:
            metric = kind(f"{PREFIX}{name}", f"{doc} (sglang-eagle3-capture)", [*base, *([own] if own else [])], **kw)
            return [metric.labels(**base, **{own: str(k)}) for k in range(n)] if own else metric.labels(**base)

        last = {"multiprocess_mode": "mostrecent"}
        self.proposed = series(Counter, "draft_position_proposed", "Verify steps that proposed a draft token at this "
                               "position", "position", steps)
        self.accepted = series(Counter, "draft_position_accepted", "Verify steps that accepted the draft tokens up to "
                               "and including this position", "position", steps)
        self.by_count = series(Counter, "verify_steps_by_accepted_drafts", "Verify steps by the number of draft tokens "
                               "they accepted, the bonus token not counted", "accepted_drafts", steps + 1)
        figures = (expected or [])[:steps]  # bounded by the positions the server drafts
        for child, p in zip(series(Gauge, "expected_position_acceptance", "Per-position acceptance the manifest's "
                                   "expected block says the draft reaches offline", "position", len(figures), **last),
                            figures):
            child.set(p)
        self.recent = series(Gauge, "recent_first_position_acceptance", "Position-0 acceptance over the alarm's window "
                             "of verify steps", **last)
        self.alarm = series(Gauge, "acceptance_alarm", "1 while position-0 acceptance is below the expected figure by "
                            "more than the margin", **last)
        self.alarm.set(0)

    def add(self, delta: Tally) -> None:
        for children, counts in ((self.proposed, delta.proposed), (self.accepted, delta.accepted),
                                 (self.by_count, delta.histogram)):
            for child, n in zip(children, counts):
                if n:
                    child.inc(n)


class _Counter:
    """One counting scheduler; tally, alarm and exporter are built at the first verify step, when what runs is known."""

    def __init__(self, server_args: Any, labels: dict | None, settings: Settings) -> None:
        self.server_args, self.labels, self.settings = server_args, labels, settings
        self.tally: Tally | None = None  # with the alarm, the exporter and the Tally copies, from _start
        self.alarm: Alarm | None = None
        self.exporter: _Exporter | None = None
        self._flushed = self._logged = self._draft = self._target = None
        self._steps = 0  # = tally.verify_steps, kept apart: that one is a sum over the histogram, this is the hot path

    def _start(self) -> None:
        launch = read_launch(self.server_args, releases.installed_or_newest())
        steps = int(launch.num_steps or 1)
        setting = steps, int(launch.eagle_topk or 1), int(launch.num_draft_tokens or steps + 1)
        self.tally = Tally(steps)
        self._flushed, self._logged = self.tally.copy(), self.tally.copy()
        self._draft = draft_model_path(self.server_args) or "DRAFT"
        self._target = getattr(self.server_args, "model_path", None) or "TARGET"
        expected, self.alarm = acceptance.arm(self._draft, setting, self.settings)
        if self.labels is not None:
            self.exporter = _Exporter(self.labels, steps, expected)
            threading.Thread(target=_flush_forever, name="eagle3-capture-metrics", daemon=True).start()

    def record(self, num_correct_drafts: int) -> None:
        if self.tally is None:
            with _LOCK:  # the flush thread starts in _start
                self._start()
        self.tally.record(num_correct_drafts)
        if self.alarm is not None:
            acceptance.log_event(self.alarm.observe(num_correct_drafts > 0), self._draft, self._target)
        self._steps += 1
        every = self.settings.log_every
        if every and self._steps % every == 0:
            recent = self.tally.since(self._logged)
            self._logged = self.tally.copy()
            logger.info("eagle3-capture: acceptance over the last %s; since start: %s", recent.line(),
                        self.tally.line())

    def flush(self) -> None:
        if self.exporter is None or self.tally is None:
            return
        now = self.tally.copy()  # one list copy: the scheduler thread may add meanwhile, the next flush has it
        self.exporter.add(now.since(self._flushed))
        self._flushed = now
        if self.alarm is not None:
            if self.alarm.observed is not None:
                self.exporter.recent.set(self.alarm.observed)
            self.exporter.alarm.set(1 if self.alarm.firing else 0)


def _stop(e: Exception) -> None:
    global _COUNTER
    _COUNTER = None
    logger.warning("eagle3-capture: acceptance counting stopped (%s: %s); serving goes on", type(e).__name__, e)


def _flush_forever() -> None:
    while True:
        time.sleep(FLUSH_SECONDS)
        flush()


def flush() -> None:
    """Move what was counted since the last flush into Prometheus (the daemon thread calls it; tests too)."""
    with _LOCK:
        if _COUNTER is None:
            return
        try:
            _COUNTER.flush()
        except Exception as e:  # noqa: BLE001 - metrics never stop a server
            _stop(e)


def _after_init(scheduler: Any) -> None:
    """Decide whether this scheduler counts; what SGLang set up is read, never changed."""
    global _COUNTER
    settings = Settings.from_environ()
    for problem in settings.problems:
        switches.warn(problem)
    context = getattr(scheduler, "metrics_collector_context", None)
    server_args = getattr(scheduler, "server_args", None)
    if not settings.enabled or context is None or server_args is None \
            or read_launch(server_args, releases.installed_or_newest()).algorithm == "NONE" \
            or not context.is_stats_logging_rank:
        return
    collector = context.collector if context.enable_metrics else None
    labels = dict(getattr(collector, "labels", None) or {}) if collector is not None else None
    for name in sorted(set(labels or ()) & set(OWN_LABELS)):
        logger.warning("eagle3-capture: SGLang labels its scheduler metrics %s=%s (--extra-metric-labels), a name "
                       "sglang_eagle3_capture's per-position metrics label their own values with: they are exported "
                       "without it, counting goes on; fix: rename that extra label", shown(name), shown(labels[name]))
    with _LOCK:
        _COUNTER = _Counter(server_args, labels, settings)
    logger.info("eagle3-capture: counting per-position acceptance in this scheduler (pid %d; %s)", os.getpid(),
                "exported on /metrics" if labels is not None else "log lines only: start SGLang with --enable-metrics "
                "to export it")


def _on_verify(num_correct_drafts: Any) -> None:
    counter = _COUNTER
    if counter is None:
        return
    try:
        counter.record(int(num_correct_drafts))
    except Exception as e:  # noqa: BLE001 - metrics never stop a server
        _stop(e)


def _wrap(seam: Any, original: Any) -> Any:
    if seam.role == "metrics.init":
        @functools.wraps(original)
        def init_metrics_collector(self, *args, **kwargs):
            out = original(self, *args, **kwargs)
            try:
                _after_init(self)
            except Exception as e:  # noqa: BLE001 - metrics never stop a server
                _stop(e)
            return out

        return init_metrics_collector

    @functools.wraps(original)
    def update_spec_correct_drafts_histogram(self, num_correct_drafts):
        original(self, num_correct_drafts)
        _on_verify(num_correct_drafts)

    return update_spec_correct_drafts_histogram


def patch() -> seams.Patch:
    return seams.Patch("metrics", releases.installed_or_newest().seams_with("metrics."), _wrap)


def apply() -> bool:
    """Install the metrics patch (both seams or neither); False when it was installed already."""
    return seams.apply(patch())


def revert() -> None:
    global _COUNTER
    seams.revert(patch())
    with _LOCK:
        _COUNTER = None
