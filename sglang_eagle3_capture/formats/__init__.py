"""Readers of foreign draft formats: each turns its own id convention into layer ids at its edge.

Every format (:mod:`.base` says what one provides) is one module and one entry in :data:`FORMATS`;
:func:`detect_format` asks them in order. All arithmetic goes through :mod:`sglang_eagle3_capture.layer_ids`.

======================================  ==========================================  ======================
source                                  what id ``i`` means                         canonical layer id
======================================  ==========================================  ======================
SGLang / SpecForge ``eagle_config``     output of layer ``i``                       ``i``
speculators ``config.json`` (vLLM)      HF ``output_hidden_states`` index           ``layer_id_of_index(i)``
original EAGLE (no key)                 fixed HF indices ``[2, N//2, N-3]``         ``layer_id_of_index``
======================================  ==========================================  ======================

speculators' legacy ``data_config.json`` (captured after layer ``i``: already layer ids, the last one the verifier
target) describes stored training samples and is read with them, by ``doctor/samples.py``.

Every capture loop these formats were trained with (vLLM, SGLang, speculators' legacy worker) appends
hidden states in ascending layer order, whatever order the config lists them in; readers therefore
return ascending ids and say so when the file listed them otherwise (docs/formats-and-convert.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from .. import releases
from ..config_keys import CONVERTED_MARKER_KEY, IDS_KEY
from ..errors import AmbiguousLayerIds, FormatError
from ..target_config import path_get
from ..userfiles import brief, read_json_object, shown
from .base import (
    CONVENTION_EAGLE_DEFAULT,
    CONVENTION_LAYER_ID,
    CONVENTION_SGLANG,
    CONVENTION_SPECULATORS_LEGACY,
    CONVENTION_VLLM,
    MATH_FLAGS,
    SGLANG_ARCH,
    ResolvedLayerIds,
)
from .eagle_default import EagleDefaultFormat
from .sglang_eagle_config import SGLangEagleConfigFormat
from .speculators import SpeculatorsFormat

__all__ = ["CONVENTION_EAGLE_DEFAULT", "CONVENTION_LAYER_ID", "CONVENTION_SGLANG", "CONVENTION_SPECULATORS_LEGACY",
           "CONVENTION_VLLM", "FORMATS", "MATH_FLAGS", "SGLANG_ARCH", "AmbiguousLayerIds", "FormatError",
           "ResolvedLayerIds", "check_draft_config", "detect_format", "load_draft_config", "load_json",
           "read_draft_config"]

# Asked in this order; the first whose detect() says yes reads the file.
FORMATS = (SpeculatorsFormat, SGLangEagleConfigFormat, EagleDefaultFormat)


def detect_format(draft_config: Any, *, file: str = "config.json"):
    """The format of a draft ``config.json`` dict, or a :class:`FormatError` naming the file, the field and the fix."""
    if not isinstance(draft_config, Mapping):
        raise FormatError(f"{file}: field '<document>': expected a JSON object; fix: point at the draft's config.json")
    if CONVERTED_MARKER_KEY in draft_config:
        raise FormatError(f"{file}: field '{CONVERTED_MARKER_KEY}': this draft was written by `sglang-eagle3-capture "
                          f"convert`; its eagle_config ids are loop indices, not a training format; fix: read its "
                          f"manifest ({draft_config[CONVERTED_MARKER_KEY]}) instead")
    for fmt in FORMATS:
        if fmt.detect(draft_config):
            return fmt
    if IDS_KEY in draft_config:
        raise FormatError(f"{file}: field '{IDS_KEY}': top-level ids without 'speculators_model_type' have no known "
                          "convention; fix: pass --layer-ids explicitly")
    archs = draft_config.get("architectures") or []
    raise FormatError(f"{shown(file)}: field 'architectures': {brief(archs)} is not a recognised EAGLE-3 draft "
                      "config; fix: point at a speculators, SpecForge, SGLang or EAGLE draft, or pass --layer-ids "
                      "explicitly")


def read_draft_config(draft_config: Any, target_hf_config: Any, *, file: str = "config.json",
                      trained_with: str | None = None) -> ResolvedLayerIds:
    """The layer ids of a draft ``config.json`` dict, read by its format; ``trained_with`` (``sglang==X`` or
    ``layer-output``) settles what an SGLang-format id list meant (:class:`AmbiguousLayerIds` otherwise)."""
    return detect_format(draft_config, file=file).layer_ids(draft_config, target_hf_config, file, trained_with)


def load_json(path: str | Path, what: str) -> dict:
    """Read a JSON object from ``path``; errors (:class:`FormatError`) name the file and ``what`` it should be."""
    return read_json_object(Path(path), fix=f"point at {what}", error=FormatError)


MAX_IDS = 100_000  # ids in one list: more than any target has layers
_OBJECT_FIELDS = ("eagle_config", "speculators_config", "transformer_layer_config", "rope_parameters", "rope_scaling")


def _id_fields() -> list[str]:
    """Every dotted path a reader here or a stock engine takes a capture-id list from."""
    paths = [IDS_KEY, f"eagle_config.{IDS_KEY}"]
    for reader in releases.other_engines():
        paths += [k for k in reader.keys if k not in paths]
    return paths


def check_draft_config(cfg: Any, file: str | Path = "config.json") -> dict:
    """The types every reader of a draft ``config.json`` relies on (the document an object; ``architectures`` a list
    of names; the nested settings objects; every capture-id list a list of integers; ``num_aux_hidden_states`` a
    positive integer), or a :class:`FormatError` naming the file, the field and the fix. Returns ``cfg``."""
    def err(fld: str, problem: str, fix: str) -> FormatError:
        return FormatError(f"{shown(file)}: field '{fld}': {problem}; fix: {fix}")

    if not isinstance(cfg, Mapping):
        raise err("<document>", "expected a JSON object", "point at the draft's config.json")
    archs = cfg.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise err("architectures", f"expected a list of class names, got {brief(archs)}",
                  'write e.g. ["LlamaForCausalLMEagle3"]')
    for key in _OBJECT_FIELDS:
        value = cfg.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise err(key, f"expected an object, got {brief(value)}", "correct the config (or re-save the draft)")
    for dotted in _id_fields():
        ids = path_get(cfg, dotted)
        if ids is None:
            continue
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise err(dotted, f"expected a list of integers, got {brief(ids)}", "list the layers, e.g. [2, 30, 58]")
        if len(ids) > MAX_IDS:
            raise err(dotted, f"{len(ids)} ids (at most {MAX_IDS})", "list the layers the fc consumes")
    num = cfg.get("num_aux_hidden_states")
    if num is not None and (not isinstance(num, int) or isinstance(num, bool) or not 0 < num <= MAX_IDS):
        raise err("num_aux_hidden_states", f"expected a positive integer, got {brief(num)}",
                  "set it to the number of hidden states the fc consumes")
    return cfg


def load_draft_config(path: str | Path) -> dict:
    """A draft ``config.json``: :func:`load_json` and :func:`check_draft_config`."""
    return check_draft_config(load_json(path, "the draft's config.json"), path)

