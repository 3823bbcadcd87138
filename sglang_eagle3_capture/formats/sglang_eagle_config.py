"""SGLang / SpecForge / Model Optimizer drafts: ids in ``eagle_config.eagle_aux_hidden_state_layer_ids``.

The writers meant "output of layer ``i``" (a forward hook on ``layers[i]``, or an SGLang release that always
added 1); an SGLang release that adds 1 only when the first id is 1 trained the same list on other
layers. :func:`sglang_readings` lists what every release in the table makes of the ids.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..config_keys import IDS_KEY
from ..errors import ConvertError, FormatError
from ..families import family_of
from ..readings import releases_label, stock_by_release
from ..target_config import target_dims
from .base import CONVENTION_SGLANG, MATH_FLAGS, SGLANG_ARCH, ResolvedLayerIds, ascending, flag, int_list, validated

FIELD = f"eagle_config.{IDS_KEY}"


def sglang_readings(draft_config: Mapping, target_hf_config: Any) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
    """``[(SGLang releases, the layer ids they feed)]`` for ``draft_config`` on its target (empty when no family
    entry covers the target)."""
    arch, n_layers, _ = target_dims(target_hf_config, "target config")
    family = family_of(arch)
    if family is None:
        return []
    return [(versions, c.fed_layer_ids) for versions, c in stock_by_release(draft_config, n_layers, family=family)]


class SGLangEagleConfigFormat:
    """A draft ``config.json`` whose ``eagle_config`` lists capture ids (SpecForge, SGLang, Model Optimizer)."""

    name = "sglang-eagle-config"

    @staticmethod
    def detect(cfg: Mapping) -> bool:
        """``eagle_config`` is present and either lists ids or is malformed (then :meth:`layer_ids` says so)."""
        ec = cfg.get("eagle_config")
        return "eagle_config" in cfg and (not isinstance(ec, Mapping) or IDS_KEY in ec)

    @staticmethod
    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str) -> ResolvedLayerIds:
        """The ids read as output-of-layer ids, ascending; a message names releases that read them otherwise."""
        ec = cfg.get("eagle_config")
        if not isinstance(ec, Mapping):
            raise FormatError(f"{file}: field 'eagle_config': expected an object, got {ec!r}; fix: this is not an "
                              "SGLang/SpecForge EAGLE-3 config, or pass --layer-ids explicitly")
        if ec.get("use_aux_hidden_state", True) is not True:
            raise FormatError(f"{file}: field 'eagle_config.use_aux_hidden_state' is {ec.get('use_aux_hidden_state')!r}: "
                              "the draft consumes no target hidden states; fix: this is not an EAGLE-3 draft")
        _, n_layers, _ = target_dims(target_hf_config, "target config")
        where = f"{file}: field '{FIELD}'"
        original = int_list(ec.get(IDS_KEY), where, "list the layers the fc consumes")
        messages: list[str] = []
        ids = ascending(original, where, messages)
        for versions, fed in sglang_readings(cfg, target_hf_config):
            if fed != tuple(ids):
                messages.append(f"{where}: read as output-of-layer ids {ids}; {releases_label(versions)} feeds "
                                f"this list as layer ids {list(fed)}. If the draft was trained through such a release "
                                "with this list, pass --layer-ids explicitly")
        layer_ids = validated(ids, n_layers, where, original)
        prov = {"source": "sglang-eagle-config", "file": file, "field": FIELD, "original_ids": original,
                "convention": CONVENTION_SGLANG}
        return ResolvedLayerIds(layer_ids, prov, tuple(messages))

    @staticmethod
    def to_sglang_config(cfg: Mapping, file: str) -> tuple[dict, list[str]]:
        """Already SGLang's layout: checked (architecture, flags, one layer) and copied."""
        archs = cfg.get("architectures") or []
        if archs != [SGLANG_ARCH]:
            raise ConvertError(f"{file}: field 'architectures': {archs!r}; fix: only {SGLANG_ARCH} drafts (SpecForge/"
                               "SGLang format) or speculators Eagle-3 drafts are converted")
        for f in MATH_FLAGS:
            flag(cfg, f, file, ConvertError)
        if cfg.get("num_hidden_layers", 1) != 1:
            raise ConvertError(f"{file}: field 'num_hidden_layers' is {cfg.get('num_hidden_layers')!r}; fix: only "
                               "one-layer drafts are converted")
        return dict(cfg), []

    @staticmethod
    def drops(tensor_name: str) -> bool:
        """SGLang-format checkpoints hold no training-only tensors."""
        return False
