"""Readers of foreign draft formats (speculators, SGLang/SpecForge, original EAGLE): each turns its id convention into
layer ids (:mod:`..core.layer_ids`); :func:`detect_format` asks :data:`FORMATS` in order. A format has ``name``,
``detect``, ``layer_ids``, ``to_sglang_config`` and ``drops``. docs/formats-and-convert.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..core import records
from ..core.config_keys import (
    CONVENTION_KEY,
    CONVERTED_MARKER_KEY,
    IDS_KEY,
    LAYER_ID_CONVENTION,
    is_fail_closed,
    is_vllm_fail_closed,
)
from ..core.errors import AmbiguousLayerIds, InputError, brief
from ..core.families import family_of
from ..core.layer_ids import FINAL_NORM, check_layer_ids, layer_id_of_index
from ..core.schemas.draft import DRAFT_CONFIG, MATH_FLAGS, MAX_DIM, SGLANG_ARCH, SGLANG_LAYOUT, SPECULATORS  # noqa: F401
from ..core.stock import default_low_mid_high_indices
from ..core.target_config import target_dims
from ..core.userfiles import read_json_object
from .readings import releases_label, stock_by_release

CONVENTION_SGLANG = "sglang-output-of-layer"
CONVENTION_VLLM = "vllm-hf-index"
CONVENTION_EAGLE_DEFAULT = "eagle-fixed-hf-index"
CONVENTION_LAYER_ID = "layer-id"


@dataclass(frozen=True)
class ResolvedLayerIds:
    """Layer ids read from a foreign format, in fc order, with provenance and messages for the user."""

    layer_ids: tuple[int, ...]
    provenance: dict
    messages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """One possible meaning of an id list: the layer ids, and the trainers/releases behind it."""

    layer_ids: tuple[int | str, ...]
    who: tuple[str, ...]
    versions: tuple[str, ...] = ()  # the SGLang releases among ``who``

    def describe(self) -> str:
        return f"layer ids {list(self.layer_ids)}: {'; '.join(self.who)}"


def validated(ids: list[int], n_layers: int, file: str, field: str | None, original: Any) -> tuple[int, ...]:
    try:
        return check_layer_ids(ids, n_layers, file=file, field=field)
    except InputError as e:
        raise InputError(file, field, f"{e.problem} (as written: {brief(original)})",
                         "correct the file, or pass --layer-ids explicitly") from e


def ascending(ids: list[int], where: str, messages: list[str]) -> list[int]:
    """Every capture loop appends in ascending order: the ids sorted, with a message when listed otherwise."""
    if ids != sorted(ids):
        messages.append(f"{where}: listed as {ids}; the capture loop it was trained with appends hidden states in "
                        f"ascending layer order, so the fc saw them as {sorted(ids)}")
    return sorted(ids)


# ---- SGLang / SpecForge / Model Optimizer: ids in eagle_config, meaning depends on how the draft was trained ----
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
                             f"{LAYER_OUTPUT_TRAINERS}: an id is past the target's last layer, so no layer output to "
                             "hook", f"pass sglang==VERSION with a release that runs this list ({known})")
        return pick
    pick = next((r for r in found if trained_with.removeprefix("sglang==") in r.versions), None)
    if pick is None:
        raise InputError(file, FIELD, f"--trained-with {brief(trained_with, 40)}: cannot have been trained through "
                         "that release", f"pass sglang==VERSION with a release that runs this list ({known}), or "
                         f"{LAYER_OUTPUT}")
    return pick


class SGLangEagleConfigFormat:
    """``eagle_config`` lists capture ids; differing readings are :class:`AmbiguousLayerIds` unless ``trained_with``
    picks one; ids marked with this package's convention are layer ids as written."""

    name = "sglang-eagle-config"

    def detect(cfg: Mapping) -> bool:
        ec = cfg.get("eagle_config")
        return isinstance(ec, Mapping) and IDS_KEY in ec

    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str, trained_with: str | None = None, *,
                  fc_in_features: int | None = None) -> ResolvedLayerIds:
        ec = cfg["eagle_config"]
        if is_fail_closed(ec[IDS_KEY]):
            raise InputError(file, FIELD, "is sglang-eagle3-capture's fail-closed object (stock SGLang refuses it at "
                             "startup), not ids: the draft's ids are in its eagle3_manifest.json",
                             "read the manifest beside this config.json (`sglang-eagle3-capture manifest show DIR`); "
                             "if it was lost, write it again with `manifest write DIR --layer-ids=...`")
        _, n_layers, _ = target_dims(target_hf_config, "target config")
        where = f"{file}: field '{FIELD}'"
        original = list(ec[IDS_KEY])
        read = {"file": file, "field": FIELD, "original_ids": original}
        if CONVENTION_KEY in ec:
            prov = {"source": "marked-eagle-config", **read, "convention": CONVENTION_LAYER_ID}
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
        prov = {"source": "sglang-eagle-config", **read, "convention": CONVENTION_SGLANG}
        if trained_with is not None:
            prov["note"] = f"trained with {trained_with} (stated by the user)"
        return ResolvedLayerIds(layer_ids, prov, tuple(messages))

    def to_sglang_config(cfg: Mapping, file: str) -> tuple[dict, list[str]]:
        records.read(SGLANG_LAYOUT, cfg, file=file)
        return dict(cfg), []

    def drops(tensor_name: str) -> bool:
        return False  # SGLang-format checkpoints hold no training-only tensors


class EagleDefaultFormat(SGLangEagleConfigFormat):
    """Original EAGLE-3 drafts (SafeAILab): no id field; the capture is fixed in code at HF indices ``[2, N//2, N-3]``,
    which stock SGLang's and vLLM's defaults also use."""

    name = "eagle-default"

    def detect(cfg: Mapping) -> bool:
        """``draft_vocab_size`` or an ``*Eagle3*`` architecture, and no top-level ids (no known convention)."""
        archs = cfg.get("architectures") or []
        eagle3 = "draft_vocab_size" in cfg or (isinstance(archs, list) and any("Eagle3" in str(a) for a in archs))
        return eagle3 and IDS_KEY not in cfg

    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str, trained_with: str | None = None, *,
                  fc_in_features: int | None = None) -> ResolvedLayerIds:
        _, n_layers, _ = target_dims(target_hf_config, "target config")
        indices = default_low_mid_high_indices(n_layers)
        layer_ids = validated([layer_id_of_index(i) for i in indices], n_layers, file, None, indices)
        msg = (f"{file}: no layer-id field; assuming the EAGLE low/mid/high default HF indices {indices} for a "
               f"{n_layers}-layer target (inferred: pass --layer-ids if the draft was trained otherwise)")
        prov = {"source": "eagle-default", "file": file, "field": None, "original_ids": None,
                "convention": CONVENTION_EAGLE_DEFAULT, "inferred": True}
        return ResolvedLayerIds(layer_ids, prov, (msg,))


# ---- speculators (vLLM project): top-level ids are HF output_hidden_states indices (absent: [2, N//2, N-3]) ----
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
                                "no fc weight says whether it is an fc input: "
                                + "; or ".join(r.describe() for r in (verifier, fc_input)),
                                "inspect the draft directory with its weights (fc.weight decides), or write the "
                                "manifest with `sglang-eagle3-capture manifest write DRAFT --layer-ids=... --target "
                                "TARGET`", readings=(verifier, fc_input))
    said = f"{where}: {original} ends with {n}, the final layer of a {n}-layer target; the fc weight says"
    if chunks == len(indices) - 1:
        messages.append(f"{said} {verifier.who[0]}; dropped")
        return indices[:-1]
    if chunks == len(indices):
        messages.append(f"{said} {fc_input.who[0]}")
        return indices
    raise InputError(file, IDS_KEY, f"{original} lists {len(indices)} hidden states ({len(indices) - 1} without the "
                     f"final layer {n}), but the draft's fc.weight takes {chunks} x {hidden}",
                     "pass --layer-ids listing exactly the hidden states the fc was trained on")


class SpeculatorsFormat:

    name = "speculators"

    def detect(cfg: Mapping) -> bool:
        return "speculators_model_type" in cfg

    def layer_ids(cfg: Mapping, target_hf_config: Any, file: str, trained_with: str | None = None, *,
                  fc_in_features: int | None = None) -> ResolvedLayerIds:
        """A trailing ``N`` (the final layer) is read by ``fc_in_features`` (None without weights)."""
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
            original, inferred, indices = None, True, default_low_mid_high_indices(n_layers)
            messages.append(f"{where}: absent; assuming speculators' default HF indices {indices} for a "
                            f"{n_layers}-layer target (inferred: check against the data-generation command, or pass "
                            "--layer-ids)")
        else:
            original, inferred, indices = list(raw), False, list(raw)
            if n_layers in indices:
                if indices[-1] != n_layers:
                    raise InputError(file, IDS_KEY, f"{original} contains {n_layers} (the final layer) but not last",
                                     "list the fc's hidden states, then at most the final layer")
                # a chunk count only when the fc width is a whole number of hidden states (else the fc checks report)
                whole = fc_in_features is not None and hidden > 0 and not fc_in_features % hidden
                indices = _trailing_final_layer(original, indices, n_layers, fc_in_features // hidden if whole
                                                else None, hidden, file, where, messages)
            if not indices:
                raise InputError(file, IDS_KEY, f"{original} names no fc input", "list the fc's hidden states")
            indices = ascending(indices, where, messages)
        layer_ids = validated([layer_id_of_index(i) for i in indices], n_layers, file, IDS_KEY, original or indices)
        prov = {"source": "speculators-default" if inferred else "speculators-config", "file": file, "field": IDS_KEY,
                "original_ids": original, "convention": CONVENTION_VLLM, "inferred": inferred}
        return ResolvedLayerIds(layer_ids, prov, tuple(messages))

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
        if "sliding_attention" in (tl.get("layer_types") or []) or tl.get("use_sliding_window"):
            window = tl.get("sliding_window")
            messages.append(f"trained with sliding-window attention (window {window}); SGLang applies a draft window "
                            f"only with --speculative-draft-window-size {window}")
        return out, messages

    def drops(tensor_name: str) -> bool:
        return tensor_name in ("verifier_lm_head.weight", "verifier_norm.weight")  # speculators' training-only


# ---- the registry ----
# Asked in this order. A format is its class, never instantiated: its functions are called on the class.
FORMATS = (SpeculatorsFormat, SGLangEagleConfigFormat, EagleDefaultFormat)


def detect_format(draft_config: Any, *, file: str = "config.json"):
    """The format of a draft ``config.json`` dict, or an :class:`InputError`."""
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
    raise InputError(file, "architectures", f"{brief(draft_config.get('architectures') or [])} is not an EAGLE-3 "
                     "draft config", "point at a speculators, SpecForge, SGLang or EAGLE draft, or pass --layer-ids")


def read_draft_config(draft_config: Any, target_hf_config: Any, *, file: str = "config.json",
                      trained_with: str | None = None, fc_in_features: int | None = None) -> ResolvedLayerIds:
    """The layer ids of a draft ``config.json`` dict, read by its format."""
    cfg = check_draft_config(draft_config, file)
    return detect_format(cfg, file=file).layer_ids(cfg, target_hf_config, file, trained_with,
                                                   fc_in_features=fc_in_features)


def check_draft_config(cfg: Any, file: str | Path = "config.json") -> Any:
    """``cfg`` as it is, once :data:`..core.schemas.draft.DRAFT_CONFIG` accepts it (the types readers rely on)."""
    records.read(DRAFT_CONFIG, cfg, file=file)
    return cfg


def load_draft_config(path: str | Path) -> dict:
    return check_draft_config(read_json_object(Path(path), fix="point at the draft's config.json"), path)
