"""The acceptance alarm on vLLM, from vLLM's own counters (docs/metrics.md, "vLLM"): the plugin adds no counter, it
wraps ``SpecDecodingProm`` (seams ``vllm.metrics.init``/``observe``) to feed the same :class:`.acceptance.Alarm`
SGLang's servers feed, for the chain vLLM runs (topk 1). Metrics never stop a server."""

from __future__ import annotations

import functools
from typing import Any

from ..core.logs import get_logger
from ..core.manifest import find_manifest
from . import acceptance

logger = get_logger(__name__)
ALARM = "_eagle3_capture_alarm"  # on the SpecDecodingProm: (Alarm, draft, target), or None


def arm(spec: Any, target: str) -> tuple | None:
    """``(Alarm, draft, target)`` when the manifest has figures for the chain vLLM runs; None (one log line) else."""
    settings = acceptance.Settings.from_environ()
    if spec is None or getattr(spec, "method", None) != "eagle3" or not settings.enabled:
        return None
    draft = str(getattr(getattr(spec, "draft_model_config", None), "model", None) or "DRAFT")
    steps = int(spec.num_speculative_tokens)
    try:
        manifest = find_manifest(draft)
    except Exception as e:  # noqa: BLE001 - the capture side refuses a bad manifest; here it only means no alarm
        logger.info("eagle3-capture: no acceptance alarm: the manifest does not read (%s)", e)
        return None
    figures, why = (None, "the draft has no manifest") if manifest is None else \
        manifest.expected_acceptance(steps, 1, steps + 1)
    if figures is None:
        logger.info("eagle3-capture: no acceptance alarm for setting %d,1,%d: %s", steps, steps + 1, why)
        return None
    logger.info("eagle3-capture: acceptance alarm armed: position-0 acceptance expected %.3f (setting %d,1,%d, from "
                "the manifest's 'expected' block, read from vLLM's spec-decode counters), margin %.2f over %d verify "
                "steps", figures[0], steps, steps + 1, settings.margin, settings.window)
    return acceptance.Alarm(figures[0], margin=settings.margin, window=settings.window), draft, target


def observe(armed: tuple, num_drafts: int, accepted_first: int) -> None:
    """Feed one scheduler step's counts to the alarm; log when it changes state."""
    alarm, draft, target = armed
    for hit in (True,) * accepted_first + (False,) * (num_drafts - accepted_first):
        event = alarm.observe(hit)
        if event is not None:
            (logger.warning if event.firing else logger.info)("eagle3-capture: %s",
                                                              acceptance.alarm_message(event, draft, target))


def _init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self, speculative_config, *args, **kwargs):
        original(self, speculative_config, *args, **kwargs)
        try:
            target = getattr(getattr(speculative_config, "target_model_config", None), "model", None) or "TARGET"
            setattr(self, ALARM, arm(speculative_config, str(target)))
        except Exception as e:  # noqa: BLE001 - metrics never stop a server
            logger.warning("eagle3-capture: no acceptance alarm: %s", e)
            setattr(self, ALARM, None)

    return __init__


def _observe(original: Any) -> Any:
    @functools.wraps(original)
    def observe_step(self, spec_decoding_stats, *args, **kwargs):
        original(self, spec_decoding_stats, *args, **kwargs)
        armed = getattr(self, ALARM, None)
        per_pos = getattr(spec_decoding_stats, "num_accepted_tokens_per_pos", None)
        if armed is not None and per_pos:
            observe(armed, int(spec_decoding_stats.num_drafts), int(per_pos[0]))

    return observe_step


WRAPPERS = {"vllm.metrics.init": _init, "vllm.metrics.observe": _observe}
