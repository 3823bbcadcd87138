"""Checks on an EAGLE-3 draft directory against its manifest before SGLang builds the draft (no SGLang import;
docs/how-it-works.md, "The draft side"): the fc chunk count as each SGLang reader derives it, the chunk width and
the math flags. Every error is a :class:`DeploymentError`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checkpoint import tensor_index
from .config_keys import IDS_KEY as IDS_FIELD
from .config_keys import is_fail_closed
from .draft_config import resolve_flags
from .errors import DeploymentError, shown
from .manifest import Manifest
from .target_config import cfg_get


def _eagle_config_value(cfg: Any, key: str, default: Any = None) -> Any:
    return cfg_get(cfg_get(cfg, "eagle_config") or {}, key, default)


@dataclass(frozen=True)
class DraftPlan:
    """A draft directory whose config agrees with its manifest, and how it will be served."""

    manifest: Manifest | None  # None: no eagle3_manifest.json (SGLang's own wiring, with a warning)
    draft_dir: Path | None  # None: not a local directory
    config_file: Path
    mla: bool  # Eagle3DeepseekV2ForCausalLM (True) or LlamaForCausalLMEagle3
    flags: dict  # draft_config.FLAG_FIELDS -> bool, as the draft was trained
    tensor_files: dict  # checkpoint tensor name -> checkpoint.TensorInfo (file, dtype, shape)

    def where(self, tensor: str) -> str:
        info = self.tensor_files.get(tensor)
        return f"{shown(info.file if info is not None else self.config_file.parent)}: tensor '{shown(tensor)}'"


def sglang_chunk_counts(cfg: Any, mla: bool) -> dict:
    """``{reader: (count, field it came from)}``: the fc chunk count each SGLang reader derives."""
    # first of: llama_eagle3.py LlamaModel.__init__: num_aux_hidden_states, non-empty eagle_config ids, 3;
    # kimi_k25_eagle3.py _get_eagle_aux_layer_count: eagle_config ids, top-level ids, 3;
    # speculative/eagle_utils.py get_draft_input_from_target_hidden_dim: all three keys in that order, 3
    num = cfg_get(cfg, "num_aux_hidden_states")
    ec_ids, top_ids = _eagle_config_value(cfg, IDS_FIELD), cfg_get(cfg, IDS_FIELD)
    ec_f, top_f, num_f = f"eagle_config.{IDS_FIELD}", IDS_FIELD, "num_aux_hidden_states"
    default = (3, "<absent: SGLang's default of 3>")
    closed = is_fail_closed(ec_ids)  # then plan_draft requires num_aux_hidden_states beside it, and the plugin's
    ec_ids = None if closed else ec_ids  # draft __init__ hands the MLA class the manifest's ids in its place

    def first(*options):
        return next(((len(v) if f != num_f else v, f) for v, f in options if v), default)

    out = {"eagle_utils.get_draft_input_from_target_hidden_dim": first((num, num_f), (ec_ids, ec_f), (top_ids, top_f))}
    if mla:
        out["kimi_k25_eagle3._get_eagle_aux_layer_count"] = (num, num_f) if closed else next(
            ((len(v), f) for v, f in ((ec_ids, ec_f), (top_ids, top_f)) if v is not None), default)
    else:
        out["llama_eagle3.LlamaModel"] = first((num, num_f), (ec_ids, ec_f))
    return out


def plan_draft(cfg: Any, draft_dir: str | Path | None, manifest: Manifest | None, *, mla: bool,
               server_window: int | None = None, draft_path: str | None = None,
               read_weights: bool = True) -> DraftPlan:
    """Check a draft config (as SGLang parsed it) against ``manifest``; read a local ``draft_dir``'s weight headers."""
    draft_dir = Path(draft_dir) if draft_dir is not None else None
    where = (draft_dir if draft_dir is not None else Path(draft_path or ".")) / "config.json"
    if cfg_get(cfg, "eagle_config") is not None and _eagle_config_value(cfg, "use_aux_hidden_state", True) is not True:
        raise DeploymentError(where, "eagle_config.use_aux_hidden_state", "is not true, so SGLang would capture no "
                              "target hidden states and skip the fc",
                              "remove it (an EAGLE-3 draft always consumes them)")
    if is_fail_closed(_eagle_config_value(cfg, IDS_FIELD)):
        fld = f"eagle_config.{IDS_FIELD}"
        if manifest is None:
            raise DeploymentError(where, fld, "is sglang-eagle3-capture's fail-closed object, which stands for the ids "
                                  "in the draft's eagle3_manifest.json, but the draft has no manifest",
                                  "restore eagle3_manifest.json beside config.json, or write it with `manifest write "
                                  "DIR --layer-ids=...`")
        if cfg_get(cfg, "num_aux_hidden_states") is None:
            raise DeploymentError(where, "num_aux_hidden_states", f"missing beside {fld}, the fail-closed object, so "
                                  "SGLang cannot count the fc's inputs", f"set it to {len(manifest.layer_ids)}, the "
                                  "manifest's layer count (`manifest write --fail-closed` writes both)")
    if manifest is not None:
        for reader, (n, fld) in sglang_chunk_counts(cfg, mla).items():
            if n != len(manifest.layer_ids):
                raise DeploymentError(where, fld, f"SGLang ({reader}) reads {n} hidden states from it, but manifest "
                                      f"{shown(manifest.path)} field 'layer_ids' lists {len(manifest.layer_ids)}",
                                      f"set eagle_config.{IDS_FIELD} and num_aux_hidden_states to agree with the "
                                      "manifest (`sglang-eagle3-capture convert SRC DST` writes both)")
        fld = "target_hidden_size" if cfg_get(cfg, "target_hidden_size") else "hidden_size"
        if cfg_get(cfg, fld) != manifest.target_hidden_size:
            raise DeploymentError(where, fld, f"the fc takes chunks of width {cfg_get(cfg, fld)}, but manifest "
                                  f"{shown(manifest.path)} field 'target.hidden_size' is "
                                  f"{manifest.target_hidden_size}", "set target_hidden_size to the hidden size of "
                                  "the target the draft was trained against")
    flags = resolve_flags(cfg, where, error=DeploymentError)
    if mla and flags["norm_before_residual"]:
        raise DeploymentError(where, "norm_before_residual", "SGLang's Eagle3DeepseekV2ForCausalLM takes the residual "
                              "before hidden_norm, and this plugin implements the other order only for "
                              "LlamaForCausalLMEagle3", "serve the draft as LlamaForCausalLMEagle3, or use a draft "
                              "trained with norm_before_residual=false")
    window = cfg_get(cfg, "sliding_window")
    if window and "sliding_attention" in (cfg_get(cfg, "layer_types") or []) and server_window != window:
        raise DeploymentError(where, "sliding_window", f"the draft was trained with a {window}-token sliding window, "
                              f"but the server's draft window is {server_window}",
                              f"pass --speculative-draft-window-size {window}")
    files = tensor_index(draft_dir) if draft_dir is not None and read_weights else {}
    return DraftPlan(manifest, draft_dir, where, mla, flags, files)

