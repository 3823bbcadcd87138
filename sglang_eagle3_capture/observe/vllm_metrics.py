"""The acceptance alarm on vLLM, fed from vLLM's own spec-decode counters by wrapping ``SpecDecodingProm`` (seams
``vllm.metrics.init``/``observe``) for the chain vLLM runs, topk 1 (docs/metrics.md, "vLLM"). Never stops a server."""

from __future__ import annotations

import functools
from typing import Any

from ..core.logs import get_logger
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
    _, alarm = acceptance.arm(logger, draft, (steps, 1, steps + 1), settings, ", read from vLLM's spec-decode counters")
    return None if alarm is None else (alarm, draft, target)


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
        if armed is not None and per_pos:  # num_drafts verify steps, per_pos[0] of them accepting the first token
            alarm, draft, target = armed
            hits = int(per_pos[0])
            for hit in (True,) * hits + (False,) * (int(spec_decoding_stats.num_drafts) - hits):
                acceptance.log_event(logger, alarm.observe(hit), draft, target)

    return observe_step


WRAPPERS = {"vllm.metrics.init": _init, "vllm.metrics.observe": _observe}
