"""speculators (vLLM project) Eagle-3 drafts: top-level ``eagle_aux_hidden_state_layer_ids`` are HF
``output_hidden_states`` indices (absent: ``[2, N//2, N-3]``); a trailing ``N`` is read by the fc's width
(docs/formats-and-convert.md)."""

from __future__ import annotations

from typing import Any, Mapping

from ...core import records
from ...core.config_keys import IDS_KEY, is_vllm_fail_closed
from ...core.errors import AmbiguousLayerIds, InputError, brief
from ...core.layer_ids import layer_id_of_index
from ...core.schemas.draft import MATH_FLAGS, SGLANG_ARCH, SPECULATORS
from ...core.stock import default_low_mid_high_indices
from ...core.target_config import target_dims
from .base import CONVENTION_VLLM, Reading, ResolvedLayerIds, ascending, fc_chunks, validated

_TRAINING_ONLY = ("verifier_lm_head.weight", "verifier_norm.weight")


def _trailing_final_layer(original: list, indices: list[int], n: int, chunks: int | None, hidden: int, file: str,
                          where: str, messages: list[str]) -> list[int]:
    """``indices`` (ending with ``n``) read by the fc's chunk count: without ``n`` when the fc takes one state fewer,
    all of them (``n`` the pre-norm last layer) when it takes them all, else an error."""
    verifier = Reading(tuple(i - 1 for i in indices[:-1]), (
        f"{n} is the verifier target speculators' data generation appends, not an fc input (speculators issue "
        f"#1065): an fc of {len(indices) - 1} x {hidden} inputs",))
    fc_input = Reading(tuple(i - 1 for i in indices), (
        f"{n} is an fc input, the last layer's output before the final norm as speculators' vLLM extraction stores "
        f"it (layer id {n - 1}): an fc of {len(indices)} x {hidden} inputs",))
    if chunks is None:
        raise AmbiguousLayerIds(file, IDS_KEY, f"{original} ends with {n}, the final layer of a {n}-layer target, and "
                                "no fc weight says whether it is an fc input: " + "; or ".join(
                                    r.describe() for r in (verifier, fc_input)),
                                "inspect the draft directory with its weights (fc.weight decides), or write the "
                                "manifest with `sglang-eagle3-capture manifest write DRAFT --layer-ids=... --target "
                                "TARGET`", readings=(verifier, fc_input))
    if chunks == len(indices) - 1:
        messages.append(f"{where}: {original} ends with {n}, the final layer of a {n}-layer target; the fc takes "
                        f"{chunks} states, so {n} is the verifier target speculators appends, not an fc input: dropped "
                        "(speculators issue #1065)")
        return indices[:-1]
    if chunks == len(indices):
        messages.append(f"{where}: {original} ends with {n}, the final layer of a {n}-layer target; the fc takes "
                        f"{chunks} states, so {n} is an fc input: the last layer's output before the final norm "
                        f"(layer id {n - 1}; speculators extracts it with vLLM, pre-norm)")
        return indices
    raise InputError(file, IDS_KEY, f"{original} lists {len(indices)} hidden states ({len(indices) - 1} without the "
                     f"final layer {n}), but the draft's fc.weight takes {chunks} x {hidden}",
                     "pass --layer-ids listing exactly the hidden states the fc was trained on")


class SpeculatorsFormat:

    name = "speculators"

    @staticmethod
    def detect(cfg: Mapping) -> bool:
        """A speculators config names its model type."""
        return "speculators_model_type" in cfg

    @staticmethod
    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str, trained_with: str | None = None, *,
                  fc_in_features: int | None = None) -> ResolvedLayerIds:
        """Top-level HF indices (absent: the inferred default); a trailing ``N`` is read by ``fc_in_features``."""
        mtype = cfg.get("speculators_model_type")
        if mtype != "eagle3":
            raise InputError(file, "speculators_model_type", f"is {brief(mtype)}; only speculators 'eagle3' drafts "
                             "can be read", "point at a speculators Eagle-3 draft")
        _, n_layers, hidden = target_dims(target_hf_config, "target config")
        where = f"{file}: field '{IDS_KEY}'"
        messages: list[str] = []
        raw = cfg.get(IDS_KEY)
        if is_vllm_fail_closed(raw):
            raise InputError(file, IDS_KEY, "is sglang-eagle3-capture's vLLM fail-closed value, which stands for the "
                             "layer ids in the draft's eagle3_manifest.json, not ids of a training format",
                             "read the draft's eagle3_manifest.json (restore it beside config.json)")
        if raw is None:
            original, inferred = None, True
            indices = default_low_mid_high_indices(n_layers)
            messages.append(f"{where}: absent; assuming speculators' default HF indices {indices} for a "
                            f"{n_layers}-layer target (inferred: check against the data-generation command, or pass "
                            "--layer-ids)")
        else:
            original, inferred, indices = list(raw), False, list(raw)
            if n_layers in indices:
                if indices[-1] != n_layers:
                    raise InputError(file, IDS_KEY, f"{original} contains {n_layers} (the final layer) but not last",
                                     "list the fc's hidden states, then at most the final layer")
                indices = _trailing_final_layer(original, indices, n_layers, fc_chunks(fc_in_features, hidden),
                                                hidden, file, where, messages)
            if not indices:
                raise InputError(file, IDS_KEY, f"{original} names no fc input", "list the fc's hidden states")
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
            raise InputError(file, "fc_norm", "norm_before_fc and fc_norm are both true (speculators forbids it)",
                             "keep only the flag the draft was trained with")
        tl, dvocab = cfg["transformer_layer_config"], c["draft_vocab_size"]
        out = {k: v for k, v in tl.items() if k not in ("architectures", "auto_map")}
        out.update(architectures=[SGLANG_ARCH], draft_vocab_size=dvocab, tie_word_embeddings=False, **flags)
        out.update({key: cfg[key] for key in ("dtype", "torch_dtype") if key in cfg})
        messages = []
        if flags["norm_before_residual"]:
            messages.append("norm_before_residual is true: stock SGLang's LlamaForCausalLMEagle3 always keeps the "
                            "pre-hidden_norm residual (the false math); serve with the plugin's draft loader")
        types = tl.get("layer_types") or []
        if "sliding_attention" in types or tl.get("use_sliding_window"):
            window = tl.get("sliding_window")
            messages.append(f"trained with sliding-window attention (window {window}); SGLang applies a draft window "
                            f"only with --speculative-draft-window-size {window}")
        return out, messages

    @staticmethod
    def drops(tensor_name: str) -> bool:
        """speculators' training-only ``verifier_*`` tensors."""
        return tensor_name in _TRAINING_ONLY

