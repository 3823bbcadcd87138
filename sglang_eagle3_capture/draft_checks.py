"""Checks on an EAGLE-3 draft directory against its manifest, before and after SGLang loads it.

No SGLang import: :mod:`sglang_eagle3_capture.draft_head` calls these from inside SGLang's draft
classes. Every error is a :class:`DraftHeadError` naming the file, the field and the fix.

What SGLang 0.5.23 derives from a draft ``config.json``, each checked here against the manifest:

- the fc's chunk count, read three ways: ``LlamaForCausalLMEagle3`` (models/llama_eagle3.py,
  ``LlamaModel.__init__``): ``num_aux_hidden_states`` > non-empty ``eagle_config`` ids > 3;
  ``Eagle3DeepseekV2ForCausalLM`` (models/kimi_k25_eagle3.py, ``_get_eagle_aux_layer_count``):
  ``eagle_config`` ids > top-level ids > 3; the draft-extend buffers (speculative/eagle_utils.py,
  ``get_draft_input_from_target_hidden_dim``): ``num_aux_hidden_states`` > ``eagle_config`` ids >
  top-level ids > 3;
- the chunk width: ``target_hidden_size``, else ``hidden_size``;
- the math flags :data:`FLAG_FIELDS` (SGLang's Llama class implements all but ``norm_before_residual``,
  its MLA class only ``fc_norm`` and ``norm_output``; :mod:`draft_head` adds the rest or refuses).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .draft_weights import tensor_index
from .manifest import Manifest, cfg_get, check_fc_width

IDS_FIELD = "eagle_aux_hidden_state_layer_ids"
FLAG_FIELDS = ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual")


class DraftHeadError(ValueError):
    """A draft SGLang must not serve as it is; the message names the file, the field and the fix."""


def _eagle(cfg: Any, key: str, default: Any = None) -> Any:
    return cfg_get(cfg_get(cfg, "eagle_config") or {}, key, default)


def _err(where: Any, fld: str, problem: str, fix: str) -> DraftHeadError:
    return DraftHeadError(f"{where}: field '{fld}': {problem}; fix: {fix}")


@dataclass(frozen=True)
class DraftPlan:
    """A draft directory whose config agrees with its manifest, and how it will be served."""

    manifest: Manifest | None  # None: no eagle3_manifest.json (SGLang's own wiring, with a warning)
    draft_dir: Path | None  # None: not a local directory
    config_file: Path
    mla: bool  # Eagle3DeepseekV2ForCausalLM (True) or LlamaForCausalLMEagle3
    flags: dict  # FLAG_FIELDS -> bool, as the draft was trained
    tensor_files: dict  # checkpoint tensor name -> draft_weights.TensorInfo (file, dtype, shape)

    def where(self, tensor: str) -> str:
        """``"<file>: tensor '<name>'"`` for error messages."""
        info = self.tensor_files.get(tensor)
        return f"{info.file if info is not None else self.config_file.parent}: tensor '{tensor}'"


def resolve_flags(cfg: Any, where: Any) -> dict:
    """The math flags as the draft was trained (``eagle_config`` first, as SGLang reads ``norm_before_fc``).

    Example::

        >>> resolve_flags({"norm_before_fc": True}, "config.json")["norm_before_fc"]
        True
    """
    flags = {}
    for name in FLAG_FIELDS:
        value = _eagle(cfg, name, cfg_get(cfg, name))
        if name == "fc_norm" and not value:
            value = cfg_get(cfg, "use_aux_norm")  # SGLang's legacy spelling
        if value is not None and not isinstance(value, bool):
            raise _err(where, name, f"expected true or false, got {value!r}", f'write "{name}": true or false')
        flags[name] = bool(value)
    if flags["norm_before_fc"] and flags["fc_norm"]:
        raise _err(where, "norm_before_fc", "norm_before_fc and fc_norm are both true (speculators forbids the pair)",
                   "keep only the flag the draft was trained with")
    return flags


def sglang_chunk_counts(cfg: Any, mla: bool) -> dict:
    """``{reader: (count, field it came from)}``: the fc chunk count each SGLang 0.5.23 reader derives."""
    num = cfg_get(cfg, "num_aux_hidden_states")
    ec_ids, top_ids = _eagle(cfg, IDS_FIELD), cfg_get(cfg, IDS_FIELD)
    ec_f, top_f, num_f = f"eagle_config.{IDS_FIELD}", IDS_FIELD, "num_aux_hidden_states"
    default = (3, "<absent: SGLang's default of 3>")

    def first(*options):
        return next(((len(v) if f != num_f else v, f) for v, f in options if v), default)

    out = {"eagle_utils.get_draft_input_from_target_hidden_dim": first((num, num_f), (ec_ids, ec_f), (top_ids, top_f))}
    if mla:
        out["kimi_k25_eagle3._get_eagle_aux_layer_count"] = next(
            ((len(v), f) for v, f in ((ec_ids, ec_f), (top_ids, top_f)) if v is not None), default)
    else:
        out["llama_eagle3.LlamaModel"] = first((num, num_f), (ec_ids, ec_f))
    return out


def check_window(cfg: Any, server_window: int | None, where: Any) -> None:
    """Refuse a draft trained with sliding-window attention unless the server's draft window matches it."""
    window = cfg_get(cfg, "sliding_window")
    if window and "sliding_attention" in (cfg_get(cfg, "layer_types") or []) and server_window != window:
        raise _err(where, "sliding_window", f"the draft was trained with a {window}-token sliding window, but the "
                   f"server's draft window is {server_window}", f"pass --speculative-draft-window-size {window}")


def plan_draft(cfg: Any, draft_dir: str | Path | None, manifest: Manifest | None, *, mla: bool,
               server_window: int | None = None) -> DraftPlan:
    """Check a draft config (as SGLang parsed it) against ``manifest`` before SGLang builds the model.

    Checks ``use_aux_hidden_state``, every fc chunk count and width SGLang derives (against the manifest,
    when there is one), the math flags the class can run, the sliding window, and the weight files'
    headers (truncation, duplicates; only for a local ``draft_dir``). Whether the ``eagle_config`` ids
    name the manifest's layers is checked against the running target
    (:func:`sglang_eagle3_capture.wiring.declared_layer_ids`, from ``draft_head``).
    """
    draft_dir = Path(draft_dir) if draft_dir is not None else None
    where = draft_dir / "config.json" if draft_dir is not None else Path("config.json")
    if cfg_get(cfg, "eagle_config") is not None and _eagle(cfg, "use_aux_hidden_state", True) is not True:
        raise _err(where, "eagle_config.use_aux_hidden_state", "is not true, so SGLang would capture no target hidden "
                   "states and skip the fc", "remove it (an EAGLE-3 draft always consumes them)")
    if manifest is not None:
        _check_against_manifest(cfg, manifest, mla, where)
    flags = resolve_flags(cfg, where)
    if mla and flags["norm_before_residual"]:
        raise _err(where, "norm_before_residual", "Eagle3DeepseekV2ForCausalLM (SGLang 0.5.23) takes the residual "
                   "before hidden_norm, and this plugin implements the other order only for LlamaForCausalLMEagle3",
                   "serve the draft as LlamaForCausalLMEagle3, or use a draft trained with norm_before_residual=false")
    check_window(cfg, server_window, where)
    files = tensor_index(draft_dir) if draft_dir is not None else {}
    return DraftPlan(manifest, draft_dir, where, mla, flags, files)


def _check_against_manifest(cfg: Any, manifest: Manifest, mla: bool, where: Path) -> None:
    mpath, k = manifest.path, len(manifest.layer_ids)
    for reader, (n, fld) in sglang_chunk_counts(cfg, mla).items():
        if n != k:
            raise _err(where, fld, f"SGLang 0.5.23 ({reader}) reads {n} hidden states from it, but manifest {mpath} "
                       f"field 'layer_ids' lists {k}", f"set eagle_config.{IDS_FIELD} and num_aux_hidden_states to "
                       "agree with the manifest (`sglang-eagle3-capture convert SRC DST` writes both)")
    hidden = cfg_get(cfg, "target_hidden_size") or cfg_get(cfg, "hidden_size")
    if hidden != manifest.target_hidden_size:
        fld = "target_hidden_size" if cfg_get(cfg, "target_hidden_size") else "hidden_size"
        raise _err(where, fld, f"the fc takes chunks of width {hidden}, but manifest {mpath} field "
                   f"'target.hidden_size' is {manifest.target_hidden_size}",
                   "set target_hidden_size to the hidden size of the target the draft was trained against")
    check_fc_width(manifest, k * hidden, where=f"{where}: field 'target_hidden_size'")


def checkpoint_name(param: str) -> str:
    """The checkpoint tensor name(s) SGLang loads into parameter ``param`` (both draft classes).

    Example::

        >>> checkpoint_name("model.layers.0.self_attn.qkv_proj.weight")
        'layers.0.self_attn.{q,k,v}_proj.weight'
    """
    name = param[len("model."):] if param.startswith("model.") else param
    name = name.replace("midlayer.", "layers.0.").replace("fused_qkv_a_proj_with_mqa", "{q_a_proj,kv_a_proj_with_mqa}")
    return name.replace("qkv_proj", "{q,k,v}_proj").replace("gate_up_proj", "{gate,up}_proj")


def audit_report(plan: DraftPlan, unconsumed: list, missing: list, shape_errors: list) -> None:
    """Raise one :class:`DraftHeadError` listing every problem the weight load found (or return)."""
    lines = [f"{plan.where(name)}: not loaded into any parameter of SGLang's "
             f"{'Eagle3DeepseekV2ForCausalLM' if plan.mla else 'LlamaForCausalLMEagle3'} (SGLang would drop it "
             "silently, and serve different math than training)" for name in unconsumed]
    files = sorted({str(i.file) for i in plan.tensor_files.values()}) or [str(plan.config_file.parent)]
    lines += [f"{', '.join(files)}: tensor '{checkpoint_name(p)}': missing; SGLang's parameter '{p}' would keep its "
              "random initial values" for p in missing]
    lines += shape_errors
    if lines:
        raise DraftHeadError(
            f"{plan.config_file.parent}: the checkpoint does not match the model SGLang builds from {plan.config_file}:\n  - "
            + "\n  - ".join(lines)
            + "\nfix: re-export the draft with `sglang-eagle3-capture convert SRC DST`, or correct config.json so it "
              "describes the checkpoint (the architecture, flags and sizes the draft was trained with)"
        )


_STACKED = {"qkv_proj.weight": {"q", "k", "v"}, "gate_up_proj.weight": {0, 1}}  # fused params: shard ids


class LoadAudit:
    """Wraps every parameter's ``weight_loader`` to record which checkpoint tensor reached which parameter."""

    def __init__(self, model: Any, plan: DraftPlan) -> None:
        self.plan, self.params = plan, dict(model.named_parameters())
        self.fc = next(p for p in self.params if p.endswith("model.fc.weight"))
        self.written: dict = {}  # parameter -> shard ids written
        self.consumed, self.seen, self.special, self.errors = set(), [], {}, []
        self.current = None

    def stream(self, weights):
        """Pass ``weights`` through, noting the tensor being loaded; ``d2t``/``t2d`` are kept for checks."""
        for name, tensor in weights:
            self.current = name
            self.seen.append(name)
            if name.rsplit(".", 1)[-1] in ("d2t", "t2d"):
                self.special[name.rsplit(".", 1)[-1]] = (name, tensor)
                self.consumed.add(name)
            yield name, tensor

    def loader(self, pname: str, inner, default: bool):
        """A ``weight_loader`` for parameter ``pname`` that checks shapes, records, then calls ``inner``."""
        plan = self.plan

        def weight_loader(p, loaded, *args, **kwargs):
            name = self.current
            m = plan.manifest
            if m is not None and pname == self.fc and loaded.dim() == 2 and loaded.shape[1] != m.fc_in_features:
                self.errors.append(f"{plan.where(name)}: input width {loaded.shape[1]}, but manifest {m.path} "
                                   f"needs len(layer_ids) x target.hidden_size = {m.fc_in_features}")
                return None
            if default and not args and p.numel() != 1 and tuple(p.shape) != tuple(loaded.shape):
                self.errors.append(f"{plan.where(name)}: shape {list(loaded.shape)}, but SGLang's parameter "
                                   f"'{pname}' is {list(p.shape)}")
                return None
            try:
                out = inner(p, loaded, *args, **kwargs)
            except (AssertionError, ValueError, RuntimeError) as e:
                raise DraftHeadError(f"{plan.where(name)}: SGLang could not load it into '{pname}' ({e}); fix: "
                                     "re-export the draft with `sglang-eagle3-capture convert SRC DST`") from e
            self.consumed.add(name)
            self.written.setdefault(pname, set()).add(args[0] if args else kwargs.get("shard_id"))
            return out

        return weight_loader

    def unconsumed(self) -> list:
        """Checkpoint tensors that reached no parameter (the MLA loader fuses q_a/kv_a on the second of the pair)."""
        for name in self.seen:
            pair = name.replace("q_a_proj", "kv_a_proj_with_mqa") if "q_a_proj" in name else \
                name.replace("kv_a_proj_with_mqa", "q_a_proj")
            if pair != name and pair in self.consumed:
                self.consumed.add(name)
        return [n for n in self.seen if n not in self.consumed]

    def missing(self, expected: list) -> list:
        """Expected parameters nothing (or, for stacked ones, not every shard) was written into."""
        def shards(p):
            return next((s for suffix, s in _STACKED.items() if p.endswith(suffix)), set())
        return [p for p in expected if p not in self.written or not shards(p) <= self.written[p]]


def check_vocab_maps(model: Any, plan: DraftPlan, special: dict) -> None:
    """Check ``d2t`` (draft id -> target id offsets) and ``t2d`` (target-vocab mask) against the built model."""
    import torch

    vocab = model.config.vocab_size
    # The unsharded vocab: under tensor parallelism lm_head.weight holds only this rank's rows
    # (sglang/srt/layers/vocab_parallel_embedding.py VocabParallelEmbedding.num_embeddings).
    draft_vocab = int(getattr(model.lm_head, "num_embeddings", model.lm_head.weight.shape[0]))
    if "d2t" not in special:
        if draft_vocab != vocab:
            raise DraftHeadError(f"{plan.config_file.parent}: tensor 'd2t': missing, and the draft vocab ({draft_vocab}) is not the "
                                 f"target vocab ({vocab}), so draft ids cannot be mapped to target ids; fix: export d2t")
        return
    name, d2t = special["d2t"]
    if d2t.dtype.is_floating_point or tuple(d2t.shape) != (draft_vocab,):
        raise DraftHeadError(f"{plan.where(name)}: {d2t.dtype} {list(d2t.shape)}, expected integer offsets of shape "
                             f"[{draft_vocab}] (draft_vocab_size); fix: export d2t from the training run")
    target_ids = d2t.long() + torch.arange(draft_vocab)
    if bool((target_ids < 0).any() or (target_ids >= vocab).any()):
        raise DraftHeadError(f"{plan.where(name)}: maps draft ids outside the target vocab [0, {vocab}); fix: export "
                             "d2t for this target's tokenizer")
    if "t2d" in special:
        tname, t2d = special["t2d"]
        if t2d.dtype != torch.bool or tuple(t2d.shape) != (vocab,) or int(t2d.sum()) != draft_vocab \
                or not bool(t2d[target_ids].all()):
            raise DraftHeadError(f"{plan.where(tname)}: disagrees with d2t (expected a bool mask of shape [{vocab}] that "
                                 f"is true exactly at the {draft_vocab} target ids d2t maps to); fix: export d2t and "
                                 "t2d from the same training run")
