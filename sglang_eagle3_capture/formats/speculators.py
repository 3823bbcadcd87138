"""speculators (vLLM project) Eagle-3 drafts and its legacy offline data config.

- ``config.json`` with ``speculators_model_type: "eagle3"``: a top-level ``eagle_aux_hidden_state_layer_ids``
  holds HF ``output_hidden_states`` indices (vLLM's reading), absent = speculators' default
  ``[2, N//2, N-3]``; the decoder layer's settings sit in ``transformer_layer_config``.
- legacy ``data_config.json`` (``VllmHiddenStatesGenerator``): ``hidden_states.layer_ids`` captured
  *after* layer ``i`` (already layer ids); the last one is the verifier target, not an fc input.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..config_keys import IDS_KEY
from ..errors import ConvertError, FormatError
from ..layer_ids import layer_id_of_index
from ..readings import default_low_mid_high_indices
from ..target_config import target_dims
from ..userfiles import brief, shown
from .base import (
    CONVENTION_VLLM,
    MATH_FLAGS,
    SGLANG_ARCH,
    ResolvedLayerIds,
    ascending,
    check_dim,
    flag,
    int_list,
    validated,
)

SPECULATORS_ARCHS = ("Eagle3DraftModel", "Eagle3Speculator")
# speculators Eagle3SpeculatorConfig (0.9.0) top-level keys: carried into the SGLang config, or metadata.
_CARRIED = {"draft_vocab_size", "target_hidden_size", IDS_KEY, "tie_word_embeddings", "transformer_layer_config",
            *MATH_FLAGS}
_METADATA = {"speculators_model_type", "speculators_version", "speculators_config", "architectures", "auto_map",
             "dtype", "torch_dtype", "transformers_version", "embed_requires_grad", "_name_or_path"}
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
            raise FormatError(f"{file}: field 'speculators_model_type' is {brief(mtype)}; fix: only speculators "
                              "'eagle3' drafts can be read")
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
            original, inferred = int_list(raw, where, "list the HF hidden-state indices the fc was trained on"), False
            indices = list(original)
            if n_layers in indices:
                if indices[-1] != n_layers:
                    raise FormatError(f"{where}: {original} contains {n_layers} (the final layer) but not last; "
                                      "fix: list the fc's hidden states, then at most the final layer")
                indices = indices[:-1]
                messages.append(f"{where}: {original} ends with {n_layers}, the final layer of a "
                                f"{n_layers}-layer target; "
                                "speculators appends it as the verifier target, not an fc input: dropped (speculators "
                                "issue #1065)")
            if not indices:
                raise FormatError(f"{where}: {original} names no fc input; fix: list the fc's hidden states")
            indices = ascending(indices, where, messages)
        layer_ids = validated([layer_id_of_index(i) for i in indices], n_layers, where, original or indices)
        prov = {"source": "speculators-default" if inferred else "speculators-config", "file": file, "field": IDS_KEY,
                "original_ids": original, "convention": CONVENTION_VLLM, "inferred": inferred}
        return ResolvedLayerIds(layer_ids, prov, tuple(messages))

    @staticmethod
    def to_sglang_config(cfg: Mapping, file: str) -> tuple[dict, list[str]]:
        """``transformer_layer_config`` flattened to the top level, with the draft vocab and the math flags."""
        unknown = sorted(set(cfg) - _CARRIED - _METADATA)
        if unknown:
            raise ConvertError(f"{file}: field '{unknown[0]}': unknown speculators setting "
                               f"(all unknown: {unknown}); fix: "
                               "convert only drafts whose every setting is understood (speculators 0.9.0 Eagle-3 keys)")
        archs = cfg.get("architectures") or list(SPECULATORS_ARCHS[:1])
        if not isinstance(archs, list) or not set(archs) <= set(SPECULATORS_ARCHS):
            raise ConvertError(f"{file}: field 'architectures': {brief(archs)} is not a speculators Eagle-3 model; "
                               f"fix: point at a draft saved as {' or '.join(SPECULATORS_ARCHS)}")
        flags = {f: flag(cfg, f, file, ConvertError) for f in MATH_FLAGS}
        if flags["norm_before_fc"] and flags["fc_norm"]:
            raise ConvertError(f"{file}: field 'fc_norm': norm_before_fc and fc_norm are both true "
                               "(speculators forbids it); fix: correct the config")
        if cfg.get("tie_word_embeddings", False) is not False:
            raise ConvertError(f"{file}: field 'tie_word_embeddings': tied draft embeddings are not converted; "
                               "fix: untie them")
        tl = cfg.get("transformer_layer_config")
        if not isinstance(tl, Mapping):
            raise ConvertError(f"{file}: field 'transformer_layer_config': expected an object; fix: re-save with "
                               "speculators")
        for key, required in (("hidden_size", True), ("num_attention_heads", True), ("intermediate_size", True),
                              ("vocab_size", True), ("num_key_value_heads", False), ("head_dim", False)):
            v = tl.get(key)
            if v is None and not required:
                continue
            check_dim(v, f"transformer_layer_config.{key}", file, error=ConvertError,
                      fix="re-save the draft with speculators")
        layer_types = tl.get("layer_types")
        if layer_types is not None and (not isinstance(layer_types, list) or
                                        not all(isinstance(t, str) for t in layer_types)):
            raise ConvertError(f"{shown(file)}: field 'transformer_layer_config.layer_types': expected a list of "
                               f"names, got {brief(layer_types)}; fix: re-save the draft with speculators")
        checks = (("model_type", "llama", "SGLang's LlamaForCausalLMEagle3 is a Llama layer (a qwen3 draft has q/k "
                   "norms it has no place for)"), ("num_hidden_layers", 1, "only one-layer drafts are converted"),
                  ("attention_bias", False, "SGLang's EAGLE-3 qkv has no bias"),
                  ("mlp_bias", False, "SGLang's LlamaMLP has no bias"),
                  ("hidden_act", "silu", "SGLang's LlamaMLP supports only silu"),
                  ("tie_word_embeddings", False, "tied embeddings"))
        for key, want, why in checks:
            if tl.get(key, want) != want:
                raise ConvertError(f"{file}: field 'transformer_layer_config.{key}' is {brief(tl.get(key))}, not "
                                   f"{want!r}: {why}; fix: this draft cannot be converted faithfully")
        dvocab = cfg.get("draft_vocab_size")
        if not isinstance(dvocab, int) or isinstance(dvocab, bool) or dvocab < 1:
            raise ConvertError(f"{file}: field 'draft_vocab_size': expected a positive integer, got {brief(dvocab)}; "
                               "fix: correct it")
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

