"""Readers of foreign training/serving formats: each turns its own id convention into layer ids at its edge.

Every reader returns a :class:`ResolvedLayerIds`: the layer ids in the order the draft's fc saw them,
the provenance to record in the manifest, and messages that must be shown to the user (an inferred
default, a dropped verifier-target id, a reordering). All arithmetic goes through
:mod:`sglang_eagle3_capture.layer_ids`.

Conventions read (see ../shared/notes/training-conventions.md):

======================================  ==========================================  ======================
source                                  what id ``i`` means                         canonical layer id
======================================  ==========================================  ======================
SGLang / SpecForge ``eagle_config``     output of layer ``i``                       ``i``
speculators ``config.json`` (vLLM)      HF ``output_hidden_states`` index           ``layer_id_of_index(i)``
speculators legacy ``data_config.json`` captured after layer ``i``; last = target   ``i`` (last dropped)
original EAGLE (no key)                 fixed HF indices ``[2, N//2, N-3]``         ``layer_id_of_index``
======================================  ==========================================  ======================

Every capture loop these formats were trained with (vLLM, SGLang, speculators' legacy worker)
appends hidden states in ascending layer order, whatever order the config lists them in; readers
therefore return ascending ids and say so when the file listed them otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .layer_ids import LayerIdError, check_layer_ids, layer_id_of_index
from .manifest import Manifest, read_json_object, target_dims

CONVERTED_MARKER_KEY = "eagle3_capture_manifest"

CONVENTION_SGLANG = "sglang-output-of-layer"
CONVENTION_VLLM = "vllm-hf-index"
CONVENTION_SPECULATORS_LEGACY = "speculators-legacy-after-layer"
CONVENTION_EAGLE_DEFAULT = "eagle-fixed-hf-index"
CONVENTION_LAYER_ID = "layer-id"


class FormatError(ValueError):
    """A foreign-format file whose layer ids cannot be read faithfully; names the file, the field, the fix."""


@dataclass(frozen=True)
class ResolvedLayerIds:
    """Layer ids read from a foreign format, in fc order, with provenance and messages for the user."""

    layer_ids: tuple[int, ...]
    provenance: dict
    messages: tuple[str, ...] = ()

    def to_manifest(self, target_hf_config: Any, *, where: str = "target config") -> Manifest:
        """A :class:`Manifest` for these ids against ``target_hf_config``."""
        arch, n_layers, hidden = target_dims(target_hf_config, where)
        return Manifest(self.layer_ids, arch, n_layers, hidden, dict(self.provenance))


def default_low_mid_high_indices(num_hidden_layers: int) -> list[int]:
    """The low/mid/high default ``[2, N//2, N-3]`` shared by EAGLE, vLLM, speculators and stock SGLang.

    These are HF ``output_hidden_states`` indices (== SGLang capture-loop indices), not layer ids.
    """
    n = num_hidden_layers
    return [2, n // 2, n - 3]


def _int_list(value: Any, where: str, fix: str) -> list[int]:
    if not isinstance(value, list) or not value or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise FormatError(f"{where}: expected a non-empty list of integers, got {value!r}; fix: {fix}")
    return list(value)


def _validated(ids: list[int], n_layers: int, where: str, original: list[int]) -> tuple[int, ...]:
    try:
        return check_layer_ids(ids, n_layers, where=where)
    except LayerIdError as e:
        raise FormatError(f"{e} (as written: {original}); fix: correct the file, or pass --layer-ids explicitly") from e


def _ascending(ids: list[int], where: str, messages: list[str]) -> list[int]:
    if ids != sorted(ids):
        messages.append(f"{where}: listed as {ids}; the capture loop it was trained with appends hidden states in "
                        f"ascending layer order, so the fc saw them as {sorted(ids)}")
    return sorted(ids)


def _refuse_converted(cfg: Mapping, file: str) -> None:
    if CONVERTED_MARKER_KEY in cfg:
        raise FormatError(f"{file}: field '{CONVERTED_MARKER_KEY}': this draft was written by `sglang-eagle3-capture "
                          f"convert`; its eagle_config ids are loop indices, not a training format; fix: read its "
                          f"manifest ({cfg[CONVERTED_MARKER_KEY]}) instead")


def read_sglang_eagle_config(draft_config: Mapping, target_hf_config: Any, *, file: str = "config.json") -> ResolvedLayerIds:
    """SGLang / SpecForge draft config: ``eagle_config.eagle_aux_hidden_state_layer_ids`` = output of layer ``i``.

    Canonical as written. SGLang >= 0.5.17 reads ids whose first element is not 1 as raw loop indices
    (see :func:`sglang_eagle3_capture.stock_wiring.stock_sglang_capture`); a message says so.
    """
    _refuse_converted(draft_config, file)
    fld = "eagle_config.eagle_aux_hidden_state_layer_ids"
    ec = draft_config.get("eagle_config")
    if not isinstance(ec, Mapping):
        raise FormatError(f"{file}: field 'eagle_config': expected an object, got {ec!r}; fix: this is not an "
                          "SGLang/SpecForge EAGLE-3 config, or pass --layer-ids explicitly")
    if ec.get("use_aux_hidden_state", True) is not True:
        raise FormatError(f"{file}: field 'eagle_config.use_aux_hidden_state' is {ec.get('use_aux_hidden_state')!r}: "
                          "the draft consumes no target hidden states; fix: this is not an EAGLE-3 draft")
    _, n_layers, _ = target_dims(target_hf_config, "target config")
    where = f"{file}: field '{fld}'"
    original = _int_list(ec.get("eagle_aux_hidden_state_layer_ids"), where, "list the layers the fc consumes")
    messages: list[str] = []
    ids = _ascending(original, where, messages)
    if ids[0] != 1:
        raw = [layer_id_of_index(i) for i in ids]
        messages.append(f"{where}: read as output-of-layer ids {ids}; stock SGLang >= 0.5.17 treats a list whose first id "
                        f"is not 1 as loop indices, i.e. layer ids {raw}. If the draft was trained through SGLang >= "
                        "0.5.17 with this list, pass --layer-ids explicitly")
    layer_ids = _validated(ids, n_layers, where, original)
    prov = {"source": "sglang-eagle-config", "file": file, "field": fld, "original_ids": original,
            "convention": CONVENTION_SGLANG}
    return ResolvedLayerIds(layer_ids, prov, tuple(messages))


def read_speculators_config(draft_config: Mapping, target_hf_config: Any, *, file: str = "config.json") -> ResolvedLayerIds:
    """speculators Eagle-3 ``config.json``: top-level ``eagle_aux_hidden_state_layer_ids`` are HF indices (vLLM).

    Absent: speculators' default ``[2, N//2, N-3]`` (marked inferred). A list ending with ``N`` (the final layer,
    which speculators' data generation appends as the verifier target, speculators issue #1065) has it dropped.
    """
    _refuse_converted(draft_config, file)
    mtype = draft_config.get("speculators_model_type")
    if mtype != "eagle3":
        raise FormatError(f"{file}: field 'speculators_model_type' is {mtype!r}; fix: only speculators 'eagle3' drafts "
                          "can be read")
    _, n_layers, _ = target_dims(target_hf_config, "target config")
    fld = "eagle_aux_hidden_state_layer_ids"
    where = f"{file}: field '{fld}'"
    messages: list[str] = []
    raw = draft_config.get(fld)
    if raw is None:
        original, inferred = None, True
        indices = default_low_mid_high_indices(n_layers)
        messages.append(f"{where}: absent; assuming speculators' default HF indices {indices} for a {n_layers}-layer "
                        "target (inferred: check against the data-generation command, or pass --layer-ids)")
    else:
        original, inferred = _int_list(raw, where, "list the HF hidden-state indices the fc was trained on"), False
        indices = list(original)
        if n_layers in indices:
            if indices[-1] != n_layers:
                raise FormatError(f"{where}: {original} contains {n_layers} (the final layer) but not last; fix: list "
                                  "the fc's hidden states, then at most the final layer")
            indices = indices[:-1]
            messages.append(f"{where}: {original} ends with {n_layers}, the final layer of a {n_layers}-layer target; "
                            "speculators appends it as the verifier target, not an fc input: dropped (speculators "
                            "issue #1065)")
        if not indices:
            raise FormatError(f"{where}: {original} names no fc input; fix: list the fc's hidden states")
        indices = _ascending(indices, where, messages)
    layer_ids = _validated([layer_id_of_index(i) for i in indices], n_layers, where, original or indices)
    prov = {"source": "speculators-default" if inferred else "speculators-config", "file": file, "field": fld,
            "original_ids": original, "convention": CONVENTION_VLLM, "inferred": inferred}
    return ResolvedLayerIds(layer_ids, prov, tuple(messages))


def read_speculators_data_config(data_config: Mapping, target_hf_config: Any, *,
                                 file: str = "data_config.json") -> ResolvedLayerIds:
    """speculators' legacy offline data ``data_config.json``: ``hidden_states.layer_ids`` captured after layer ``i``.

    Those ids are already layer ids; the last one is the verifier target (not an fc input) and is dropped.
    """
    fld = "hidden_states.layer_ids"
    where = f"{file}: field '{fld}'"
    hs = data_config.get("hidden_states")
    if not isinstance(hs, Mapping):
        raise FormatError(f"{file}: field 'hidden_states': expected an object, got {hs!r}; fix: point at the "
                          "data_config.json written by speculators' legacy data generation")
    original = _int_list(hs.get("layer_ids"), where, "point at the data_config.json of the data the draft was trained on")
    if len(original) < 2:
        raise FormatError(f"{where}: {original} has no fc input besides the verifier target (last id); fix: "
                          "check the data-generation command")
    _, n_layers, _ = target_dims(target_hf_config, "target config")
    messages = [f"{where}: last id {original[-1]} is the verifier target, not an fc input: dropped"]
    final_layer_id = layer_id_of_index(n_layers)  # HF index N = output of the last decoder layer
    if original[-1] != final_layer_id:
        messages.append(f"{where}: the verifier target {original[-1]} is not the final layer {final_layer_id}; the draft "
                        "was trained against a different distribution from the one the target verifies with")
    ids = _ascending(original[:-1], where, messages)
    layer_ids = _validated(ids, n_layers, where, original)
    prov = {"source": "speculators-data-config", "file": file, "field": fld, "original_ids": original,
            "convention": CONVENTION_SPECULATORS_LEGACY}
    return ResolvedLayerIds(layer_ids, prov, tuple(messages))


def read_eagle_default(target_hf_config: Any, *, file: str = "config.json") -> ResolvedLayerIds:
    """Original EAGLE-3 drafts (no layer key): the fixed low/mid/high HF indices ``[2, N//2, N-3]`` (inferred)."""
    _, n_layers, _ = target_dims(target_hf_config, "target config")
    indices = default_low_mid_high_indices(n_layers)
    where = f"{file}: no layer-id field"
    layer_ids = _validated([layer_id_of_index(i) for i in indices], n_layers, where, indices)
    msg = (f"{where}; assuming the EAGLE low/mid/high default HF indices {indices} for a {n_layers}-layer target "
           "(inferred: pass --layer-ids if the draft was trained otherwise)")
    prov = {"source": "eagle-default", "file": file, "field": None, "original_ids": None,
            "convention": CONVENTION_EAGLE_DEFAULT, "inferred": True}
    return ResolvedLayerIds(layer_ids, prov, (msg,))


def read_draft_config(draft_config: Mapping, target_hf_config: Any, *, file: str = "config.json") -> ResolvedLayerIds:
    """Pick the reader for a draft ``config.json``: speculators, SGLang/SpecForge ``eagle_config``, or EAGLE default."""
    if not isinstance(draft_config, Mapping):
        raise FormatError(f"{file}: field '<document>': expected a JSON object; fix: point at the draft's config.json")
    _refuse_converted(draft_config, file)
    if "speculators_model_type" in draft_config:
        return read_speculators_config(draft_config, target_hf_config, file=file)
    if "eagle_config" in draft_config:
        ec = draft_config["eagle_config"]
        if not isinstance(ec, Mapping) or "eagle_aux_hidden_state_layer_ids" in ec:
            return read_sglang_eagle_config(draft_config, target_hf_config, file=file)
    if "eagle_aux_hidden_state_layer_ids" in draft_config:
        raise FormatError(f"{file}: field 'eagle_aux_hidden_state_layer_ids': top-level ids without "
                          "'speculators_model_type' have no known convention; fix: pass --layer-ids explicitly")
    archs = draft_config.get("architectures") or []
    if "draft_vocab_size" in draft_config or any("Eagle3" in str(a) for a in archs):
        return read_eagle_default(target_hf_config, file=file)
    raise FormatError(f"{file}: field 'architectures': {archs!r} is not a recognised EAGLE-3 draft config; fix: point at "
                      "a speculators, SpecForge, SGLang or EAGLE draft, or pass --layer-ids explicitly")


def load_json(path: str | Path, what: str) -> dict:
    """Read a JSON object from ``path``; errors (:class:`FormatError`) name the file and ``what`` it should be."""
    return read_json_object(Path(path), fix=f"point at {what}", error=FormatError)


def read_draft_dir(draft_dir: str | Path, target_hf_config: Any) -> ResolvedLayerIds:
    """:func:`read_draft_config` on ``draft_dir/config.json``."""
    path = Path(draft_dir) / "config.json"
    return read_draft_config(load_json(path, "the draft's config.json"), target_hf_config, file=str(path))
