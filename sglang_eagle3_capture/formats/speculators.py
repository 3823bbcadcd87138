"""speculators (vLLM project) Eagle-3 drafts and its legacy offline data config.

- ``config.json`` with ``speculators_model_type: "eagle3"``: a top-level ``eagle_aux_hidden_state_layer_ids``
  holds HF ``output_hidden_states`` indices (vLLM's reading), absent = speculators' default
  ``[2, N//2, N-3]``; the decoder layer's settings sit in ``transformer_layer_config``.
- legacy ``data_config.json`` (``VllmHiddenStatesGenerator``): ``hidden_states.layer_ids`` captured
  *after* layer ``i`` (already layer ids); the last one is the verifier target, not an fc input.
"""

from __future__ import annotations

from typing import Any, Mapping

from .. import records
from ..config_keys import IDS_KEY
from ..errors import ConvertError, FormatError, brief
from ..layer_ids import layer_id_of_index
from ..readings import default_low_mid_high_indices
from ..schemas.draft import MATH_FLAGS, SGLANG_ARCH, SPECULATORS, SPECULATORS_ARCHS  # noqa: F401 (re-exported)
from ..target_config import target_dims
from .base import CONVENTION_VLLM, ResolvedLayerIds, ascending, validated

_TRAINING_ONLY = ("verifier_lm_head.weight", "verifier_norm.weight")


class SpeculatorsFormat:
    """speculators Eagle-3 ``config.json`` (see the module doc)."""

    name = "speculators"

    @staticmethod
    def detect(cfg: Mapping) -> bool:
        """A speculators config names its model type."""
        return "speculators_model_type" in cfg

    @staticmethod
    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str, trained_with: str | None = None) -> ResolvedLayerIds:
        """Top-level HF indices (absent: the default, marked inferred); a trailing ``N`` (the verifier target
        that speculators' data generation appends, speculators issue #1065) is dropped."""
        mtype = cfg.get("speculators_model_type")
        if mtype != "eagle3":
            raise FormatError(file, "speculators_model_type", f"is {brief(mtype)}; only speculators 'eagle3' drafts "
                              "can be read", "point at a speculators Eagle-3 draft")
        _, n_layers, _ = target_dims(target_hf_config, "target config")
        where = f"{file}: field '{IDS_KEY}'"
        messages: list[str] = []
        raw = cfg.get(IDS_KEY)
        if raw is None:
            original, inferred = None, True
            indices = default_low_mid_high_indices(n_layers)
            messages.append(f"{where}: absent; assuming speculators' default HF indices {indices} for a "
                            f"{n_layers}-layer "
                            "target (inferred: check against the data-generation command, or pass --layer-ids)")
        else:
            original, inferred = list(raw), False
            indices = list(original)
            if n_layers in indices:
                if indices[-1] != n_layers:
                    raise FormatError(file, IDS_KEY, f"{original} contains {n_layers} (the final layer) but not last",
                                      "list the fc's hidden states, then at most the final layer")
                indices = indices[:-1]
                messages.append(f"{where}: {original} ends with {n_layers}, the final layer of a "
                                f"{n_layers}-layer target; "
                                "speculators appends it as the verifier target, not an fc input: dropped (speculators "
                                "issue #1065)")
            if not indices:
                raise FormatError(file, IDS_KEY, f"{original} names no fc input", "list the fc's hidden states")
            indices = ascending(indices, where, messages)
        layer_ids = validated([layer_id_of_index(i) for i in indices], n_layers, file, IDS_KEY, original or indices)
        prov = {"source": "speculators-default" if inferred else "speculators-config", "file": file, "field": IDS_KEY,
                "original_ids": original, "convention": CONVENTION_VLLM, "inferred": inferred}
        return ResolvedLayerIds(layer_ids, prov, tuple(messages))

    @staticmethod
    def to_sglang_config(cfg: Mapping, file: str) -> tuple[dict, list[str]]:
        """``transformer_layer_config`` flattened to the top level, with the draft vocab and the math flags."""
        c = records.read(SPECULATORS, cfg, file=file)  # every key understood; the layer a Llama layer
        flags = {f: bool(c[f]) for f in MATH_FLAGS}
        if flags["norm_before_fc"] and flags["fc_norm"]:
            raise ConvertError(file, "fc_norm", "norm_before_fc and fc_norm are both true (speculators forbids it)",
                               "keep only the flag the draft was trained with")
        tl, dvocab = cfg["transformer_layer_config"], c["draft_vocab_size"]
        out = {k: v for k, v in tl.items() if k not in ("architectures", "auto_map")}
        out.update(architectures=[SGLANG_ARCH], draft_vocab_size=dvocab, tie_word_embeddings=False, **flags)
        for key in ("dtype", "torch_dtype"):
            if key in cfg:
                out[key] = cfg[key]
        messages = []
        if flags["norm_before_residual"]:
            messages.append("norm_before_residual is true: stock SGLang's LlamaForCausalLMEagle3 always keeps the "
                            "pre-hidden_norm residual (the false math); serve with the plugin's draft loader")
        types = tl.get("layer_types") or []
        if "sliding_attention" in types or tl.get("use_sliding_window"):
            messages.append(f"trained with sliding-window attention (window {tl.get('sliding_window')}); "
                            "SGLang applies "
                            f"a draft window only with --speculative-draft-window-size {tl.get('sliding_window')}")
        return out, messages

    @staticmethod
    def drops(tensor_name: str) -> bool:
        """speculators' training-only ``verifier_*`` tensors."""
        return tensor_name in _TRAINING_ONLY

