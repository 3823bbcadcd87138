"""Original EAGLE-3 drafts (SafeAILab EAGLE): no layer-id field; the capture is fixed in code at HF indices
``[2, N//2, N-3]``, which stock SGLang's and vLLM's defaults also use."""

from __future__ import annotations

from typing import Any, Mapping

from ...core.config_keys import IDS_KEY
from ...core.layer_ids import layer_id_of_index
from ...core.stock import default_low_mid_high_indices
from ...core.target_config import target_dims
from .base import CONVENTION_EAGLE_DEFAULT, ResolvedLayerIds, validated
from .sglang_eagle_config import SGLangEagleConfigFormat


class EagleDefaultFormat:
    """An EAGLE-3 draft config (``draft_vocab_size`` or an ``*Eagle3*`` architecture) that names no ids."""

    name = "eagle-default"

    @staticmethod
    def detect(cfg: Mapping) -> bool:
        """An EAGLE-3 draft with no id list anywhere (top-level ids have no known convention: not this format)."""
        archs = cfg.get("architectures") or []
        eagle3 = "draft_vocab_size" in cfg or (isinstance(archs, list) and any("Eagle3" in str(a) for a in archs))
        return eagle3 and IDS_KEY not in cfg

    @staticmethod
    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str, trained_with: str | None = None, *,
                  fc_in_features: int | None = None) -> ResolvedLayerIds:
        """The fixed low/mid/high default, marked inferred."""
        _, n_layers, _ = target_dims(target_hf_config, "target config")
        indices = default_low_mid_high_indices(n_layers)
        where = f"{file}: no layer-id field"
        layer_ids = validated([layer_id_of_index(i) for i in indices], n_layers, file, None, indices)
        msg = (f"{where}; assuming the EAGLE low/mid/high default HF indices {indices} for a {n_layers}-layer target "
               "(inferred: pass --layer-ids if the draft was trained otherwise)")
        prov = {"source": "eagle-default", "file": file, "field": None, "original_ids": None,
                "convention": CONVENTION_EAGLE_DEFAULT, "inferred": True}
        return ResolvedLayerIds(layer_ids, prov, (msg,))

    to_sglang_config = staticmethod(SGLangEagleConfigFormat.to_sglang_config)
    drops = staticmethod(SGLangEagleConfigFormat.drops)
