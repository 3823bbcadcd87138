"""Readers of foreign draft formats: each turns its own id convention into layer ids at its edge.

Every format (:mod:`.base` says what one provides) is one module and one entry in :data:`FORMATS`;
:func:`detect_format` asks them in order. All arithmetic goes through :mod:`sglang_eagle3_capture.core.layer_ids`.
The conventions are tabled in docs/formats-and-convert.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...core import records
from ...core.config_keys import CONVERTED_MARKER_KEY, IDS_KEY
from ...core.errors import InputError, brief
from ...core.schemas.draft import DRAFT_CONFIG
from ...core.userfiles import read_json_object
from .base import CONVENTION_LAYER_ID, CONVENTION_VLLM, SGLANG_ARCH, ResolvedLayerIds
from .eagle_default import EagleDefaultFormat
from .sglang_eagle_config import SGLangEagleConfigFormat
from .speculators import SpeculatorsFormat

__all__ = ["CONVENTION_LAYER_ID", "CONVENTION_VLLM", "FORMATS", "SGLANG_ARCH", "EagleDefaultFormat",
           "SGLangEagleConfigFormat", "SpeculatorsFormat", "check_draft_config", "detect_format", "load_draft_config",
           "read_draft_config"]

# Asked in this order; the first whose detect() says yes reads the file.
FORMATS = (SpeculatorsFormat, SGLangEagleConfigFormat, EagleDefaultFormat)


def detect_format(draft_config: Any, *, file: str = "config.json"):
    """The format of a draft ``config.json`` dict, or an :class:`InputError` naming the file, the field and the fix."""
    if not isinstance(draft_config, Mapping):
        raise InputError(file, "<document>", "expected a JSON object", "point at the draft's config.json")
    if CONVERTED_MARKER_KEY in draft_config:
        raise InputError(file, CONVERTED_MARKER_KEY, "this draft was written by `sglang-eagle3-capture convert`; its "
                         "eagle_config ids are loop indices, not a training format",
                         f"read its manifest ({brief(draft_config[CONVERTED_MARKER_KEY], 80)}) instead")
    for fmt in FORMATS:
        if fmt.detect(draft_config):
            return fmt
    if IDS_KEY in draft_config:
        raise InputError(file, IDS_KEY, "top-level ids without 'speculators_model_type' have no known convention",
                         "pass --layer-ids explicitly")
    raise InputError(file, "architectures", f"{brief(draft_config.get('architectures') or [])} is not a recognised "
                     "EAGLE-3 draft config", "point at a speculators, SpecForge, SGLang or EAGLE draft, or pass "
                     "--layer-ids explicitly")


def read_draft_config(draft_config: Any, target_hf_config: Any, *, file: str = "config.json",
                      trained_with: str | None = None, fc_in_features: int | None = None) -> ResolvedLayerIds:
    """The layer ids of a draft ``config.json`` dict, read by its format; ``trained_with`` settles what an
    SGLang-format list meant; ``fc_in_features`` (None without weights) whether a speculators list's trailing final
    layer is an fc input."""
    cfg = check_draft_config(draft_config, file)
    return detect_format(cfg, file=file).layer_ids(cfg, target_hf_config, file, trained_with,
                                                   fc_in_features=fc_in_features)


def check_draft_config(cfg: Any, file: str | Path = "config.json") -> Any:
    """``cfg`` as it is, once :data:`~...core.schemas.draft.DRAFT_CONFIG` accepts it (the types every format reader
    relies on), or an :class:`InputError` naming the file, the field and the fix."""
    records.read(DRAFT_CONFIG, cfg, file=file)
    return cfg


def load_draft_config(path: str | Path) -> dict:
    """A draft ``config.json`` read (errors name the file) and passed through :func:`check_draft_config`."""
    return check_draft_config(read_json_object(Path(path), fix="point at the draft's config.json"), path)
