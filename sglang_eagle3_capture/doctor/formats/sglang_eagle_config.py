"""SGLang / SpecForge / Model Optimizer drafts: ids in ``eagle_config.eagle_aux_hidden_state_layer_ids``, whose
meaning depends on how the draft was trained (a layer hook, HF ``hidden_states``, or the SGLang release that fed it:
:func:`.readings.stock_by_release`). Differing readings raise
:class:`~sglang_eagle3_capture.core.errors.AmbiguousLayerIds` unless ``trained_with`` says which; ids marked with this
package's convention are layer ids as written. docs/formats-and-convert.md."""

from __future__ import annotations

from typing import Any, Mapping

from ...core import records
from ...core.config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION, is_fail_closed
from ...core.errors import AmbiguousLayerIds, InputError, brief
from ...core.families import family_of
from ...core.layer_ids import FINAL_NORM
from ...core.schemas.draft import SGLANG_LAYOUT
from ...core.target_config import target_dims
from ..readings import releases_label, stock_by_release
from .base import CONVENTION_LAYER_ID, CONVENTION_SGLANG, Reading, ResolvedLayerIds, ascending, validated

FIELD = f"eagle_config.{IDS_KEY}"
LAYER_OUTPUT = "layer-output"  # --trained-with value: a trainer that hooks layer outputs
HF_HIDDEN_STATES = "hf-hidden-states"  # --trained-with value: a trainer that reads HF output_hidden_states[i + 1]
LAYER_OUTPUT_TRAINERS = "a trainer that hooks layer outputs (SpecForge's HF backend, NVIDIA Model Optimizer)"
# Where the list names the last layer (N-1) the two kinds of layer-output trainer part: transformers' hidden_states[N]
# is the post-norm last_hidden_state (utils/output_capturing.py, tie_last_hidden_states), a hook sees the layer's
# own, pre-norm output.
HOOK_TRAINERS = "a trainer that hooks decoder layer outputs (NVIDIA Model Optimizer): the last one before the norm"
HF_INDEX_TRAINERS = ("a trainer that reads HF output_hidden_states[i + 1] (SpecForge's HF backend): index N is "
                     "transformers' post-norm last_hidden_state, layer id final_norm")
DECIDE = ("run `sglang-eagle3-capture verify DRAFT --data SAMPLES` on a few training samples stored with every "
          "layer (it ranks each reading), then `sglang-eagle3-capture manifest write DRAFT --layer-ids=... --target "
          "TARGET`; or pass --trained-with (sglang==VERSION, layer-output or hf-hidden-states) when you know how it "
          "was trained")


def readings(draft_config: Mapping, target_hf_config: Any, file: Any = None) -> list[Reading]:
    """Every meaning the config's ids can have on its target, each with who trains that way."""
    ec = draft_config.get("eagle_config") or {}
    ids = () if is_fail_closed(ec.get(IDS_KEY)) else tuple(sorted(ec.get(IDS_KEY) or ()))
    arch, n_layers, _ = target_dims(target_hf_config, "target config")
    if ids and ids[-1] == n_layers - 1:  # the last layer: pre-norm to a hook, post-norm to HF's hidden_states[N]
        out = [Reading(ids, (HOOK_TRAINERS,)), Reading((*ids[:-1], FINAL_NORM), (HF_INDEX_TRAINERS,))]
    else:
        out = [Reading(ids, (LAYER_OUTPUT_TRAINERS,))]
    family = family_of(arch)
    if family is None:
        return out
    for versions, c in stock_by_release(draft_config, n_layers, family=family, file=file):
        if c.problem or c.mis_fed or len(c.fed_layer_ids) != len(ids):
            continue  # no draft was trained through a release that cannot run it (or on states no layer id names)
        label = f"SGLang {releases_label(versions).removeprefix('stock SGLang ')} ({c.rule})"
        same = next((r for r in out if r.layer_ids == c.fed_layer_ids), None)
        if same is None:
            out.append(Reading(c.fed_layer_ids, (label,), versions))
        else:
            out[out.index(same)] = Reading(same.layer_ids, (*same.who, label), (*same.versions, *versions))
    if len(out) > 1 and ids and max(ids) > n_layers - 1:  # no layer N to hook (GPT-OSS reads a max of N as loop
        out = out[1:]  # indices): only the releases that ran it remain; alone, the reading fails validation as before
    return out


def _pick(found: list[Reading], trained_with: str, file: str) -> Reading:
    """The reading the stated trainer gives; InputError when no reading of this list is that trainer's."""
    known = ", ".join(v for r in found for v in r.versions) or "none"
    if trained_with in (LAYER_OUTPUT, HF_HIDDEN_STATES):
        kinds = (LAYER_OUTPUT_TRAINERS, HOOK_TRAINERS if trained_with == LAYER_OUTPUT else HF_INDEX_TRAINERS)
        pick = next((r for r in found if any(k in r.who for k in kinds)), None)
        if pick is None:
            raise InputError(file, FIELD, f"--trained-with {trained_with}: cannot have been trained by "
                             f"{LAYER_OUTPUT_TRAINERS}: an id is past the target's last layer, so there is no such "
                             "layer output to hook",
                             f"pass sglang==VERSION with a release that runs this list ({known})")
        return pick
    pick = next((r for r in found if trained_with.removeprefix("sglang==") in r.versions), None)
    if pick is None:
        raise InputError(file, FIELD, f"--trained-with {brief(trained_with, 40)}: cannot have been trained through "
                         "that release", f"pass sglang==VERSION with a release that runs this list ({known}), or "
                         f"{LAYER_OUTPUT}")
    return pick


class SGLangEagleConfigFormat:
    """A draft ``config.json`` whose ``eagle_config`` lists capture ids (SpecForge, SGLang, Model Optimizer)."""

    name = "sglang-eagle-config"

    @staticmethod
    def detect(cfg: Mapping) -> bool:
        ec = cfg.get("eagle_config")
        return isinstance(ec, Mapping) and IDS_KEY in ec

    @staticmethod
    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str, trained_with: str | None = None, *,
                  fc_in_features: int | None = None) -> ResolvedLayerIds:
        """The layer ids the list means; :class:`AmbiguousLayerIds` when the meanings differ and ``trained_with`` does
        not pick one."""
        ec = cfg["eagle_config"]
        if is_fail_closed(ec[IDS_KEY]):
            raise InputError(file, FIELD, "is sglang-eagle3-capture's fail-closed object (stock SGLang refuses it at "
                             "startup), not ids: the draft's ids are in its eagle3_manifest.json",
                             "read the manifest beside this config.json (`sglang-eagle3-capture manifest show DIR`); "
                             "if it was lost, write it again with `manifest write DIR --layer-ids=...`")
        _, n_layers, _ = target_dims(target_hf_config, "target config")
        where = f"{file}: field '{FIELD}'"
        original = list(ec[IDS_KEY])
        if CONVENTION_KEY in ec:
            prov = {"source": "marked-eagle-config", "file": file, "field": FIELD, "original_ids": original,
                    "convention": CONVENTION_LAYER_ID}
            return ResolvedLayerIds(validated(original, n_layers, file, FIELD, original), prov,
                                    (f"{where}: marked as layer ids by eagle_config.{CONVENTION_KEY} (fc order)",))
        if FINAL_NORM in original:  # no stock id means the final norm's output: only a marked list names it
            raise InputError(file, f"{FIELD}[{original.index(FINAL_NORM)}]", f"is {FINAL_NORM!r}, this package's "
                             "layer id for the final norm's output, in an id list stock SGLang reads as its own ids",
                             f"mark the list as layer ids (eagle_config.{CONVENTION_KEY} = {LAYER_ID_CONVENTION!r}) "
                             "or declare them in eagle3_manifest.json (`sglang-eagle3-capture manifest write DIR "
                             "--layer-ids=...`)")
        messages: list[str] = []
        ascending(original, where, messages)
        found = readings(cfg, target_hf_config, file)
        if trained_with is not None:
            chosen = _pick(found, trained_with, file)
            messages.append(f"{where}: read as trained with {trained_with}: {chosen.describe()}")
        elif len({r.layer_ids for r in found}) > 1:
            raise AmbiguousLayerIds(file, FIELD, f"{original} means different layers depending on how the draft was "
                                    "trained, and nothing in the checkpoint says which: "
                                    + "; or ".join(r.describe() for r in found), DECIDE, readings=found)
        else:
            chosen = found[0]
        layer_ids = validated(list(chosen.layer_ids), n_layers, file, FIELD, original)
        prov = {"source": "sglang-eagle-config", "file": file, "field": FIELD, "original_ids": original,
                "convention": CONVENTION_SGLANG}
        if trained_with is not None:
            prov["note"] = f"trained with {trained_with} (stated by the user)"
        return ResolvedLayerIds(layer_ids, prov, tuple(messages))

    @staticmethod
    def to_sglang_config(cfg: Mapping, file: str) -> tuple[dict, list[str]]:
        """Already SGLang's layout: checked (:data:`~...core.schemas.draft.SGLANG_LAYOUT`) and copied."""
        records.read(SGLANG_LAYOUT, cfg, file=file)
        return dict(cfg), []

    @staticmethod
    def drops(tensor_name: str) -> bool:
        """SGLang-format checkpoints hold no training-only tensors."""
        return False
