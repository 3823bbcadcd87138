"""``convert``: a speculators- or SpecForge-format EAGLE-3 draft becomes a draft directory for SGLang 0.5.23.

The output holds (written to a temporary sibling, then renamed, so a failure leaves nothing):

- ``config.json`` that SGLang parses as ``LlamaForCausalLMEagle3``: the speculators
  ``transformer_layer_config`` flattened to the top level, ``draft_vocab_size``, ``target_hidden_size``,
  ``num_aux_hidden_states``, the math flags (``norm_before_fc``, ``fc_norm``, ``norm_output``,
  ``norm_before_residual``) carried, ``eagle_config`` with capture ids, and the marker
  ``"eagle3_capture_manifest": "eagle3_manifest.json"``;
- the weights, renamed to SGLang checkpoint names (``layers.0.*`` -> ``midlayer.*``, which every
  SGLang release's llama_eagle3.py loads; 0.5.23 maps it back to its ``layers.0`` module), every tensor
  checked against the config's shapes; speculators' training-only ``verifier_*`` tensors are dropped
  and reported; anything else unknown is refused;
- ``eagle3_manifest.json``, the source of truth for the wiring.

``eagle_config.eagle_aux_hidden_state_layer_ids`` holds the manifest's ids as capture-loop (HF)
indices, ordered so that stock SGLang 0.5.23, even without the plugin, captures exactly the
manifest's hidden states (:func:`stock_wiring.stock_safe_eagle_config_ids`); when that is impossible
the report says so.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .draft_weights import INDEX_FILENAME, WeightsError, expected_eagle3_tensors, read_safetensors_header, tensor_index, weight_files
from .formats import CONVENTION_LAYER_ID, CONVERTED_MARKER_KEY, FormatError, load_json, read_draft_config
from .manifest import MANIFEST_FILENAME, Manifest, ManifestError, load_target_config, target_dims, write_manifest
from .stock_wiring import stock_safe_eagle_config_ids, stock_sglang_capture

SGLANG_ARCH = "LlamaForCausalLMEagle3"
SPECULATORS_ARCHS = ("Eagle3DraftModel", "Eagle3Speculator")
MATH_FLAGS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")
# speculators Eagle3SpeculatorConfig (0.9.0) top-level keys: carried into the SGLang config, or metadata.
_SPEC_CARRIED = {"draft_vocab_size", "target_hidden_size", "eagle_aux_hidden_state_layer_ids", "tie_word_embeddings",
                 "transformer_layer_config", *MATH_FLAGS}
_SPEC_METADATA = {"speculators_model_type", "speculators_version", "speculators_config", "architectures", "auto_map",
                  "dtype", "torch_dtype", "transformers_version", "embed_requires_grad", "_name_or_path"}
_TRAINING_ONLY = ("verifier_lm_head.weight", "verifier_norm.weight")
_LEGACY_NAMES = {"aux_norm_low.": "fc_norm.0.", "aux_norm_mid.": "fc_norm.1.", "aux_norm_high.": "fc_norm.2."}


class ConvertError(ValueError):
    """A draft that cannot be converted faithfully; names the file, the field and the fix."""


@dataclass(frozen=True)
class ConvertReport:
    """What :func:`convert` did: the manifest, renamed and dropped tensors, and messages for the user."""

    src: Path
    dst: Path
    source_format: str
    manifest: Manifest
    renamed: tuple[tuple[str, str], ...]
    dropped: tuple[str, ...]
    not_copied: tuple[str, ...]
    messages: tuple[str, ...]

    def lines(self) -> list[str]:
        """Human-readable summary, one item per line."""
        out = [f"converted {self.source_format} draft {self.src} -> {self.dst}",
               f"layer ids {list(self.manifest.layer_ids)} (provenance: {self.manifest.provenance.get('source')})"]
        out += [f"renamed {len(self.renamed)} tensors ({', '.join(sorted({a.split('.')[0] for a, _ in self.renamed}))}.* "
                "-> SGLang names)"] if self.renamed else []
        out += [f"dropped training-only tensor {n}" for n in self.dropped]
        out += [f"not copied: {n}" for n in self.not_copied]
        return out + [f"note: {m}" for m in self.messages]


def _flag(cfg: Mapping, name: str, file: str) -> bool:
    v = cfg.get(name, False)
    if not isinstance(v, bool):
        raise ConvertError(f"{file}: field '{name}': expected true/false, got {v!r}; fix: correct the config")
    return v


def _sglang_config_from_speculators(cfg: Mapping, file: str) -> tuple[dict, list[str]]:
    unknown = sorted(set(cfg) - _SPEC_CARRIED - _SPEC_METADATA)
    if unknown:
        raise ConvertError(f"{file}: field '{unknown[0]}': unknown speculators setting (all unknown: {unknown}); fix: "
                           "convert only drafts whose every setting is understood (speculators 0.9.0 Eagle-3 keys)")
    archs = cfg.get("architectures") or list(SPECULATORS_ARCHS[:1])
    if not isinstance(archs, list) or not set(archs) <= set(SPECULATORS_ARCHS):
        raise ConvertError(f"{file}: field 'architectures': {archs!r} is not a speculators Eagle-3 model; fix: point at "
                           f"a draft saved as {' or '.join(SPECULATORS_ARCHS)}")
    flags = {f: _flag(cfg, f, file) for f in MATH_FLAGS}
    if flags["norm_before_fc"] and flags["fc_norm"]:
        raise ConvertError(f"{file}: field 'fc_norm': norm_before_fc and fc_norm are both true (speculators forbids it); "
                           "fix: correct the config")
    if cfg.get("tie_word_embeddings", False) is not False:
        raise ConvertError(f"{file}: field 'tie_word_embeddings': tied draft embeddings are not converted; fix: untie them")
    tl = cfg.get("transformer_layer_config")
    if not isinstance(tl, Mapping):
        raise ConvertError(f"{file}: field 'transformer_layer_config': expected an object; fix: re-save with speculators")
    checks = (("model_type", "llama", "SGLang's LlamaForCausalLMEagle3 is a Llama layer (a qwen3 draft has q/k norms "
               "it has no place for)"), ("num_hidden_layers", 1, "only one-layer drafts are converted"),
              ("attention_bias", False, "SGLang's EAGLE-3 qkv has no bias"), ("mlp_bias", False, "SGLang's LlamaMLP has no bias"),
              ("hidden_act", "silu", "SGLang's LlamaMLP supports only silu"), ("tie_word_embeddings", False, "tied embeddings"))
    for key, want, why in checks:
        if tl.get(key, want) != want:
            raise ConvertError(f"{file}: field 'transformer_layer_config.{key}' is {tl.get(key)!r}, not {want!r}: {why}; "
                               "fix: this draft cannot be converted faithfully")
    dvocab = cfg.get("draft_vocab_size")
    if not isinstance(dvocab, int) or isinstance(dvocab, bool) or dvocab < 1:
        raise ConvertError(f"{file}: field 'draft_vocab_size': expected a positive integer, got {dvocab!r}; fix: correct it")
    out = {k: v for k, v in tl.items() if k not in ("architectures", "auto_map")}
    out.update(architectures=[SGLANG_ARCH], draft_vocab_size=dvocab, tie_word_embeddings=False, **flags)
    for key in ("dtype", "torch_dtype"):
        if key in cfg:
            out[key] = cfg[key]
    messages = []
    if flags["norm_before_residual"]:
        messages.append("norm_before_residual is true: stock SGLang 0.5.23's LlamaForCausalLMEagle3 always keeps the "
                        "pre-hidden_norm residual (the false math); serve with the plugin's draft loader")
    types = tl.get("layer_types") or []
    if "sliding_attention" in types or tl.get("use_sliding_window"):
        messages.append(f"trained with sliding-window attention (window {tl.get('sliding_window')}); SGLang 0.5.23 applies "
                        f"a draft window only with --speculative-draft-window-size {tl.get('sliding_window')}")
    return out, messages


def _sglang_config_from_specforge(cfg: Mapping, file: str) -> tuple[dict, list[str]]:
    archs = cfg.get("architectures") or []
    if archs != [SGLANG_ARCH]:
        raise ConvertError(f"{file}: field 'architectures': {archs!r}; fix: only {SGLANG_ARCH} drafts (SpecForge/SGLang "
                           "format) or speculators Eagle-3 drafts are converted")
    for f in MATH_FLAGS:
        _flag(cfg, f, file)
    if cfg.get("num_hidden_layers", 1) != 1:
        raise ConvertError(f"{file}: field 'num_hidden_layers' is {cfg.get('num_hidden_layers')!r}; fix: only one-layer "
                           "drafts are converted")
    return dict(cfg), []


def _resolve_target(src_cfg: Mapping, target: Any, src: Path) -> tuple[Any, str]:
    if isinstance(target, Mapping):
        return target, "target config"
    if target is None:
        verifier = ((src_cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path")
        if verifier and (Path(verifier) / "config.json").is_file():
            target = verifier
        else:
            raise ConvertError(f"{src / 'config.json'}: field 'speculators_config.verifier.name_or_path': no local target "
                               f"config ({verifier!r}); fix: pass --target TARGET (the target model dir or its config.json)")
    data, path = load_target_config(target)
    return data, str(path)


def _name_map(names: Sequence[str], fmt: str, file_of: Mapping[str, Path]) -> tuple[dict[str, str], list[str]]:
    """source name -> SGLang name, and the training-only tensors dropped."""
    mapping, dropped = {}, []
    for name in names:
        if name in _TRAINING_ONLY and fmt == "speculators":
            dropped.append(name)
            continue
        new = name
        if new.startswith("layers.0."):
            new = "midlayer." + new[len("layers.0."):]
        for old, repl in _LEGACY_NAMES.items():
            if new.startswith(old):
                new = repl + new[len(old):]
        if new in mapping.values():
            raise ConvertError(f"{file_of[name]}: tensor '{name}': maps to {new}, which another tensor also maps to; "
                               "fix: keep one of them")
        mapping[name] = new
    return mapping, dropped


def _check_tensors(index, mapping, expected, src_dir: Path) -> None:
    files = ", ".join(str(f) for f in sorted({i.file for i in index.values()})) or str(src_dir)
    have = {mapping[n]: (n, index[n]) for n in mapping}
    for new, (old, info) in sorted(have.items()):
        if new not in expected:
            raise ConvertError(f"{info.file}: tensor '{old}': not part of a {SGLANG_ARCH} draft with this config "
                               "(SGLang would silently drop it); fix: remove it, or convert only drafts whose every "
                               "tensor is understood")
        shape, _ = expected[new]
        if info.shape != shape:
            raise ConvertError(f"{info.file}: tensor '{old}': shape {list(info.shape)}, but the config implies "
                               f"{list(shape)}; fix: the config and the weights disagree")
    for new, (shape, required) in sorted(expected.items()):
        if required and new not in have:
            raise ConvertError(f"{files}: tensor '{new}': missing (shape {list(shape)} expected); fix: convert a "
                               "complete checkpoint")


def _write_weights(src_dir: Path, out_dir: Path, mapping: Mapping[str, str]) -> None:
    from safetensors.torch import load_file, save_file  # lazy: torch only when converting

    for f in weight_files(src_dir):
        _, metadata = read_safetensors_header(f)
        try:
            tensors = load_file(str(f))
        except Exception as e:  # safetensors raises its own error type for corrupt data
            raise WeightsError(f"{f}: field '<data>': cannot load ({e}); fix: re-export the checkpoint") from e
        renamed = {mapping[n]: t for n, t in tensors.items() if n in mapping}
        save_file(renamed, str(out_dir / f.name), metadata=dict(metadata) or {"format": "pt"})
    index = src_dir / INDEX_FILENAME
    if index.is_file():
        data = load_json(index, "the checkpoint index")
        data["weight_map"] = {mapping[n]: fn for n, fn in data["weight_map"].items() if n in mapping}
        (out_dir / INDEX_FILENAME).write_text(_dumps(data), encoding="utf-8")


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, indent=2) + "\n"


def convert(src: str | os.PathLike, dst: str | os.PathLike, *, target: Any = None,
            layer_ids: Sequence[int] | None = None) -> ConvertReport:
    """Convert the draft in ``src`` into an SGLang 0.5.23 draft directory ``dst`` (must not exist or be empty).

    ``target``: the target model directory, its ``config.json``, or the config as a dict (default: the
    speculators verifier path, when it is a local directory). ``layer_ids``: override the ids read from
    the source config (recorded as provenance ``manual``).
    """
    src, dst = Path(src), Path(dst)
    cfg_file = src / "config.json"
    try:
        cfg = load_json(cfg_file, "the draft's config.json")
    except FormatError as e:
        raise ConvertError(str(e)) from e
    if CONVERTED_MARKER_KEY in cfg:
        raise ConvertError(f"{cfg_file}: field '{CONVERTED_MARKER_KEY}': already converted; fix: use the directory as is")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise ConvertError(f"{dst}: field '<dir>': exists and is not an empty directory; fix: choose a new DST")
    fmt = "speculators" if "speculators_model_type" in cfg else "specforge"
    out_cfg, messages = (_sglang_config_from_speculators if fmt == "speculators" else _sglang_config_from_specforge)(cfg, str(cfg_file))
    target_cfg, target_where = _resolve_target(cfg, target, src)
    arch, n_layers, hidden = target_dims(target_cfg, target_where)

    try:
        resolved = read_draft_config(cfg, target_cfg, file=str(cfg_file))
    except FormatError as e:
        if layer_ids is None:
            raise
        resolved, read_error = None, str(e)
    if layer_ids is None:
        ids, prov = resolved.layer_ids, dict(resolved.provenance)
        prov["file"] = str(cfg_file.resolve())  # the manifest travels; say exactly which file it came from
        messages += list(resolved.messages)
    else:
        ids = tuple(layer_ids)
        said = (f"{resolved.provenance['source']} read {list(resolved.layer_ids)}" if resolved is not None else
                f"the config could not be read: {read_error}")
        prov = {"source": "manual", "convention": CONVENTION_LAYER_ID, "note": f"given to convert; {said}"}
        if resolved is not None and tuple(resolved.layer_ids) != ids:
            messages.append(f"--layer-ids {list(ids)} overrides {list(resolved.layer_ids)} read from {cfg_file}")
    manifest = Manifest(ids, arch, n_layers, hidden, prov, path=dst / MANIFEST_FILENAME)

    cfg_target_hidden = cfg.get("target_hidden_size")
    if cfg_target_hidden is not None and cfg_target_hidden != hidden:
        raise ConvertError(f"{cfg_file}: field 'target_hidden_size' is {cfg_target_hidden}, but target {target_where} "
                           f"field 'hidden_size' is {hidden}; fix: pass the target the draft was trained against")
    k = len(ids)
    out_cfg.update(target_hidden_size=hidden, num_aux_hidden_states=k)
    eagle_config = dict(out_cfg.get("eagle_config") or {})
    eagle_config.update(eagle_aux_hidden_state_layer_ids=stock_safe_eagle_config_ids(ids), use_aux_hidden_state=True)
    out_cfg["eagle_config"] = eagle_config
    out_cfg[CONVERTED_MARKER_KEY] = MANIFEST_FILENAME

    index = tensor_index(src)
    mapping, dropped = _name_map(list(index), fmt, {n: i.file for n, i in index.items()})
    if "fc.weight" in index and index["fc.weight"].shape[-1] != manifest.fc_in_features:
        fc = index["fc.weight"]
        origin = (f"{prov['file']} field '{prov['field']}'" if prov.get("field") else f"source '{prov['source']}'")
        raise ConvertError(f"{fc.file}: tensor 'fc.weight': input width {fc.shape[-1]}, but {origin} gives {k} layer ids "
                           f"{list(ids)} x target hidden_size {hidden} = {manifest.fc_in_features}; fix: pass --layer-ids "
                           "listing exactly the hidden states the fc was trained on, and the target it was trained against")
    _check_tensors(index, mapping, expected_eagle3_tensors(out_cfg, k, hidden), src)

    stock = stock_sglang_capture(out_cfg, n_layers, "0.5.23")
    if stock.fed_layer_ids != tuple(ids) or stock.problem:
        messages.append(f"without the plugin, {stock.describe()}; the manifest says {list(ids)}: serve with the plugin")

    tmp = dst.parent / f".{dst.name}.converting"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        _write_weights(src, tmp, mapping)
        (tmp / "config.json").write_text(_dumps(out_cfg), encoding="utf-8")
        write_manifest(tmp, manifest)
        if dst.exists():
            dst.rmdir()
        os.replace(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    weights = {f.name for f in weight_files(src)} | {INDEX_FILENAME, "config.json"}
    not_copied = tuple(sorted(p.name for p in src.iterdir() if p.name not in weights))
    renamed = tuple((a, b) for a, b in mapping.items() if a != b)
    return ConvertReport(src, dst, fmt, manifest, renamed, tuple(dropped), not_copied, tuple(messages))


__all__ = ["ConvertError", "ConvertReport", "convert", "ManifestError", "WeightsError"]
