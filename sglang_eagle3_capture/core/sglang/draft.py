"""The draft-head loader: SGLang's two EAGLE-3 draft classes, made to follow the manifest.

Methods are patched *on* SGLang's own classes, not subclasses, because SGLang's MLA detection
(configs/model_config.py) and registry key on the names ``LlamaForCausalLMEagle3`` and
``Eagle3DeepseekV2ForCausalLM``: ``__init__`` checks the config against the manifest and adds the math SGLang
lacks, ``load_weights`` audits SGLang's own loader, ``set_embed`` keeps a checkpoint embedding that differs from the
target's (docs/how-it-works.md, "The draft side"). Chunks arrive in manifest order, so fc columns are never permuted.
"""

from __future__ import annotations

import contextlib
import functools
import types
from pathlib import Path
from typing import Any

from .. import releases, seams
from ..config_keys import IDS_KEY, is_fail_closed
from ..draft_checks import DraftPlan
from ..launch import check_draft
from ..layer_ids import hidden_state_indices
from ..logs import get_logger
from ..manifest import MANIFEST_FILENAME, WRITE_HINT, check_fc_width, find_manifest
from ..releases.schema import Seam
from ..target_config import cfg_get
from . import resolution
from .audit import LoadAudit, audit_report, check_vocab_maps
from .runtime import draft_model_path, draft_window_size

logger = get_logger(__name__)

STATE_ATTR = "_eagle3_capture_draft"  # the DraftPlan on a patched draft instance
_ABSENT = object()


def _first_layer_forward_norm_before_residual(self, positions, embeds, hidden_states, forward_batch, residual):
    """``llama_eagle3.LlamaDecoderLayer.forward`` (input layer) with the residual taken after ``hidden_norm``."""
    import torch

    hidden_states = self.hidden_norm(hidden_states)
    residual = hidden_states  # speculators Eagle3FirstLayerMixin with norm_before_residual=True
    x = torch.cat([self.input_layernorm(embeds), hidden_states], dim=-1)
    x = self.self_attn(positions=positions, hidden_states=x, forward_batch=forward_batch)
    x, residual = self.post_attention_layernorm(x, residual)
    return self.mlp(x), residual


def _draft_plan(config: Any, mla: bool) -> DraftPlan:
    path = draft_model_path()
    local = Path(path) if path and Path(path).is_dir() else None
    record = resolution.recorded()
    if record is not None and local is not None and record.draft_dir == local:
        manifest = record.manifest  # read once, by this process's target resolution
    else:
        manifest = find_manifest(local) if local is not None else None
    if manifest is None:  # as the target side (resolution.resolve_target_capture): SGLang's own wiring, said loudly
        logger.warning("eagle3-capture: draft %s has no %s%s: its fc is fed what SGLang reads from config.json; "
                       "tensors and math flags are still checked. Fix: `%s`", path, MANIFEST_FILENAME,
                       "" if local is not None else " (not a local directory)", WRITE_HINT)
    return check_draft(config, path, manifest, mla=mla, server_window=draft_window_size())


def _install_math(model: Any, plan: DraftPlan) -> None:
    """Check the fc SGLang built and add the flag implementations SGLang's class lacks."""
    inner = model.model
    if plan.manifest is not None:
        check_fc_width(plan.manifest, int(inner.fc.weight.shape[1]), file=plan.config_file, field="fc.weight")
    if not plan.mla and plan.flags["norm_before_residual"]:
        first = inner.layers[0]
        first.forward = types.MethodType(_first_layer_forward_norm_before_residual, first)
    if plan.mla and plan.flags["norm_before_fc"]:
        from sglang.srt.layers.layernorm import RMSNorm

        inner.input_norm = RMSNorm(int(inner.fc.weight.shape[1]), eps=model.config.rms_norm_eps)
        inner.fc.register_forward_pre_hook(lambda fc, args: (inner.input_norm(args[0]), *args[1:]))
    ids = list(plan.manifest.layer_ids) if plan.manifest is not None else "as SGLang reads config.json"
    logger.info("eagle3-capture: draft %s: fc consumes layer ids %s; flags %s", plan.draft_dir, ids, plan.flags)


@contextlib.contextmanager
def _manifest_ids_for_counting(config: Any, plan: DraftPlan):
    """While SGLang builds the draft, the manifest's ids stand in for the fail-closed object, so a class that counts
    the fc's inputs from them (kimi_k25_eagle3._get_eagle_aux_layer_count) counts the manifest's."""
    ec = cfg_get(config, "eagle_config")
    if plan.manifest is None or not isinstance(ec, dict) or not is_fail_closed(ec.get(IDS_KEY)):
        yield
        return
    sentinel = ec[IDS_KEY]
    ec[IDS_KEY] = hidden_state_indices(plan.manifest.layer_ids)
    try:
        yield
    finally:
        ec[IDS_KEY] = sentinel


def _patched_init(original, mla: bool):
    @functools.wraps(original)
    def __init__(self, config, *args, **kwargs):
        plan = _draft_plan(config, mla)
        with _manifest_ids_for_counting(config, plan):
            original(self, config, *args, **kwargs)
        _install_math(self, plan)
        setattr(self, STATE_ATTR, plan)

    return __init__


def _expected_params(model: Any, params: dict) -> list:
    """Parameters the checkpoint must fill: all but those SGLang later takes from the target."""
    cfg = model.config
    shares_embed = not (cfg_get(cfg, "target_hidden_size") and cfg_get(cfg, "target_hidden_size") != cfg.hidden_size)
    from_target = {"model.embed_tokens.weight"} if shares_embed else set()
    if getattr(model, "load_lm_head_from_target", False):
        from_target |= {"model.embed_tokens.weight", "lm_head.weight"}
    return [p for p in params if p not in from_target]


def _swap_loader(param: Any, fn: Any) -> Any:
    """Install ``fn`` as ``param``'s weight_loader; return what to pass back to undo it."""
    if isinstance(getattr(type(param), "weight_loader", None), property):  # layers/parameter.py BasevLLMParameter
        old, param._weight_loader = param._weight_loader, fn
        return ("_weight_loader", old)
    old = param.__dict__.get("weight_loader", _ABSENT)
    param.weight_loader = fn
    return ("weight_loader", old)


def _audited_load(model: Any, plan: DraftPlan, original, weights) -> None:
    from sglang.srt.model_loader.weight_utils import default_weight_loader

    audit = LoadAudit(model, plan)
    undo = {}
    for pname, p in audit.params.items():
        inner = getattr(p, "weight_loader", None)
        fn = audit.loader(pname, inner or default_weight_loader, default=inner is None)
        undo[pname] = _swap_loader(p, fn)
    try:
        original(model, audit.stream(weights))
    finally:
        for pname, (attr, old) in undo.items():
            p = audit.params[pname]
            if old is _ABSENT:
                del p.weight_loader
            else:
                setattr(p, attr, old)
    audit_report(plan, audit.unconsumed(), audit.missing(_expected_params(model, audit.params)), audit.errors)
    check_vocab_maps(model, plan, audit.special)
    setattr(model, "_eagle3_capture_loaded", frozenset(audit.written))


def _patched_load_weights(original):
    @functools.wraps(original)
    def load_weights(self, weights):
        plan = getattr(self, STATE_ATTR, None)
        if plan is None:  # built before the patch was applied
            return original(self, weights)
        return _audited_load(self, plan, original, weights)

    return load_weights


def _patched_set_embed(original):
    @functools.wraps(original)
    def set_embed(self, embed):
        own = self.model.embed_tokens.weight
        if "model.embed_tokens.weight" in getattr(self, "_eagle3_capture_loaded", ()):
            import torch

            if own.shape == embed.shape and not torch.equal(own, embed.to(own.dtype)):
                logger.warning("eagle3-capture: %s: keeping the checkpoint's embed_tokens, which differs from the "
                               "target's embedding; the draft was trained with it", getattr(self, STATE_ATTR).draft_dir)
                return None
        return original(self, embed)

    return set_embed


_WRAPPERS = {
    "draft.llama.__init__": functools.partial(_patched_init, mla=False),
    "draft.llama.load_weights": _patched_load_weights,
    "draft.llama.set_embed": _patched_set_embed,
    "draft.mla.__init__": functools.partial(_patched_init, mla=True),
    "draft.mla.load_weights": _patched_load_weights,
    "draft.mla.set_embed": _patched_set_embed,
}


def _patch() -> seams.Patch:
    def wrap(seam: Seam, original: Any) -> Any:
        return _WRAPPERS[seam.role](original)

    return seams.Patch("draft", releases.installed_or_newest().seams_with("draft."), wrap)


def apply_draft_head_patch() -> bool:
    """Patch SGLang's EAGLE-3 draft classes; ``False`` when already applied."""
    releases.check_sglang_version()
    if not seams.apply(_patch()):
        return False
    logger.info("eagle3-capture: patched %s", seams.describe(_patch()))
    return True


def revert_draft_head_patch() -> None:
    """Restore every patched attribute exactly (an attribute the class did not define is deleted again)."""
    seams.revert(_patch())


def is_draft_head_patched() -> bool:
    """True when :func:`apply_draft_head_patch` is in effect in this process."""
    return seams.is_applied(_patch())


def status() -> str:
    """``name=patched|original`` for each draft seam."""
    return seams.status(_patch())
