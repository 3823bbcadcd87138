"""What every foreign draft format provides, and the helpers its readers share.

A format is one object in :data:`sglang_eagle3_capture.formats.FORMATS` with:

- ``name`` and ``detect(cfg)``: whether a draft ``config.json`` is in this format (the registry asks the
  formats in order; the first that says yes reads the file);
- ``layer_ids(cfg, target_hf_config, file, trained_with=None)``: the draft's layer ids (fc order) as a
  :class:`ResolvedLayerIds`, converted from the format's own id convention at this edge (``trained_with``
  only matters where the format's ids mean different layers for different trainers);
- ``to_sglang_config(cfg, file)``: the config SGLang's ``LlamaForCausalLMEagle3`` reads, and messages;
- ``drops(tensor_name)``: whether a checkpoint tensor is training-only (dropped by ``convert``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import DraftFormatError, FormatError, InputError, LayerIdError
from ..layer_ids import check_layer_ids
from ..target_config import is_int
from ..userfiles import brief, shown

CONVENTION_SGLANG = "sglang-output-of-layer"
CONVENTION_VLLM = "vllm-hf-index"
CONVENTION_SPECULATORS_LEGACY = "speculators-legacy-after-layer"
CONVENTION_EAGLE_DEFAULT = "eagle-fixed-hf-index"
CONVENTION_LAYER_ID = "layer-id"
MAX_DIM = 1 << 24  # no draft dimension comes near it; bounds what a config alone can make this package allocate


def check_dim(value: object, key: str, where: object, *, error: type[InputError] = DraftFormatError,
              fix: str = "correct the config") -> int:
    """``value`` of field ``key`` as a draft dimension: a positive integer of at most :data:`MAX_DIM`, else
    ``error`` naming ``where``, the field and ``fix``."""
    if not is_int(value) or not 0 < value <= MAX_DIM:
        raise error(f"{shown(where)}: field '{key}': expected a positive integer (at most {MAX_DIM}), got "
                    f"{brief(value)}; fix: {fix}")
    return value


MATH_FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
SGLANG_ARCH = "LlamaForCausalLMEagle3"


@dataclass(frozen=True)
class ResolvedLayerIds:
    """Layer ids read from a foreign format, in fc order, with provenance and messages for the user."""

    layer_ids: tuple[int, ...]
    provenance: dict
    messages: tuple[str, ...] = ()


def int_list(value: Any, where: str, fix: str) -> list[int]:
    """``value`` as a non-empty list of integers, or a :class:`FormatError` naming ``where`` and ``fix``."""
    if (not isinstance(value, list) or not value
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in value)):
        raise FormatError(f"{where}: expected a non-empty list of integers, got {brief(value)}; fix: {fix}")
    return list(value)


def validated(ids: list[int], n_layers: int, where: str, original: Any) -> tuple[int, ...]:
    """Range- and duplicate-checked layer ids; errors carry the ids as the file wrote them."""
    try:
        return check_layer_ids(ids, n_layers, where=where)
    except LayerIdError as e:
        raise FormatError(f"{e} (as written: {brief(original)}); fix: correct the file, or pass --layer-ids "
                          "explicitly") from e


def ascending(ids: list[int], where: str, messages: list[str]) -> list[int]:
    """Every capture loop appends in ascending order: the ids sorted, with a message when the file listed them
    otherwise."""
    if ids != sorted(ids):
        messages.append(f"{where}: listed as {ids}; the capture loop it was trained with appends hidden states in "
                        f"ascending layer order, so the fc saw them as {sorted(ids)}")
    return sorted(ids)


def flag(cfg: Mapping, name: str, file: str, error: type[FormatError] = FormatError) -> bool:
    """A true/false config field (absent: false), or ``error`` naming the file and field."""
    v = cfg.get(name, False)
    if not isinstance(v, bool):
        raise error(f"{file}: field '{name}': expected true/false, got {brief(v)}; fix: correct the config")
    return v
