"""The target side of the capture patch (docs/how-it-works.md): the release's resolution seam
(``ModelRunner.init_spec_aux_hidden_state``, the first gate), and per family each causal LM's
``set_eagle3_layers_to_capture`` (:func:`configure`, the second gate) and each decoder stack's ``forward`` (hands
its output to the stack's ``_eagle3_capture_feed``). One :mod:`..seams` patch each; a family that cannot be
patched is left alone and recorded (:func:`unavailable`).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .. import families, policy, ranks, releases, seams, switches
from ..capture import CapturePlan, FcFeed, plan_capture
from ..errors import DeploymentError
from ..families import PACKED, Family
from ..families.schema import PP_FROM_RUNTIME, STREAM_FROM_INPUT_NORM, STREAM_FROM_LOOP
from ..layer_ids import layer_ids_of_loop
from ..logs import get_logger
from ..releases.schema import Release
from . import resolution, selfcheck
from .runtime import current_tp_rank, draft_hf_config, draft_model_path, tp_all_gather

logger = get_logger(__name__)

# Feeds installed on live models; revert() detaches their final-norm hooks (instance state, not a class's).
_FEEDS: "weakref.WeakSet[FcFeed]" = weakref.WeakSet()
# Family name -> why its patch is not applied in this process (apply() records it; resolution refuses by it).
_UNAVAILABLE: dict[str, str] = {}


def _pp_group(model: Any, family: Family) -> Any:
    """The pipeline group ``model``'s stock ``set_eagle3_layers_to_capture`` consults."""
    if family.pp_group == PP_FROM_RUNTIME:
        from sglang.srt.runtime_context import get_parallel

        return get_parallel().pp_group
    return model.pp_group


def decoder_stack(model: Any, family: Family) -> Any:
    """The decoder stack of ``model`` (a causal LM of ``family``): its ``model_attr``, or the attribute the family
    table names for that class (a wrapper that configures its language model itself)."""
    return getattr(model, family.stack_attr(type(model).__name__))


def num_decoder_layers(model: Any, family: Family) -> int:
    """N of ``model``: ``num_hidden_layers`` of its config, or of ``text_config`` for a class the family table lists
    there, unless the class already keeps it as its ``config`` (qwen3_vl.py:1343-1347)."""
    config = model.config
    if type(model).__name__ in family.text_config and hasattr(config, "text_config"):
        config = config.text_config
    return config.num_hidden_layers


def _model_meta(plan: CapturePlan | None, model: Any, where: str, family: Family) -> dict:
    stack = decoder_stack(model, family)
    loop = list(stack.layers_to_capture)
    if plan is None:
        ids = list(layer_ids_of_loop(loop, num_decoder_layers(model, family)))
        order, last = list(range(len(ids))), False
    else:
        ids, order, last = list(plan.layer_ids), list(plan.chunk_order), plan.captures_last_layer
    return {"layer_ids": ids, "loop_indices": loop, "last_layer_at_final_norm": last,
            "final_norm_output": plan is not None and plan.captures_final_norm, "chunk_order": order,
            "source": where, "model_class": type(model).__name__, "family": family.name,
            "tp_rank": current_tp_rank(), "pp_rank": getattr(_pp_group(model, family), "rank_in_group", None)}


def _install_feed(stack: Any, feed: FcFeed | None) -> None:
    """Make ``feed`` the decoder stack's ``_eagle3_capture_feed``, detaching the one it replaces."""
    old = vars(stack).get("_eagle3_capture_feed")
    if old is not None:
        old.detach()
    if feed is not None:
        feed.attach(stack)
        _FEEDS.add(feed)
    stack._eagle3_capture_feed = feed


def _set_layer_flags(stack: Any, loop_indices: list, family: Family) -> None:
    """Qwen-MoE's loop reads a per-layer flag that SGLang never clears: set it on exactly ``loop_indices``."""
    if family.layer_flag is not None:
        wanted = set(loop_indices)
        for i, layer in enumerate(stack.layers):
            setattr(layer, family.layer_flag, i in wanted)


def _feed(plan: CapturePlan | None, layers: list, dump: Any, n_layers: int, family: Family, stack: Any) -> FcFeed:
    norms = (family.layers, family.input_norm) if family.stream_from == STREAM_FROM_INPUT_NORM else None
    return FcFeed(plan, layers, dump, n_layers, model_name=type(stack).__name__, final_norm=family.final_norm,
                  stream_norms=norms)


def configure(model: Any, declared: resolution.DeclaredLayerIds, family: Family) -> None:
    """The second gate: make ``model`` feed the draft exactly ``declared``'s layer ids, in their order, refusing a
    decoder stack the family patch does not serve or layers off this pipeline stage; arms the self-check."""
    pp_group = _pp_group(model, family)
    if not pp_group.is_last_rank:  # as stock: only the last stage captures
        return
    stack = decoder_stack(model, family)
    if declared.family not in (None, family.name) or not getattr(type(stack).forward, seams.MARK, False):
        raise DeploymentError(declared.file, declared.field, f"{type(model).__name__} (decoder stack "
                              f"{type(stack).__name__}) is not served by the capture patch of the "
                              f"{declared.family or family.name} family: its forward is not one the family table lists",
                              "report it (the family table needs this class), and serve a draft without a manifest "
                              "meanwhile")
    n_layers = num_decoder_layers(model, family)
    if len(getattr(stack, family.layers)) != n_layers:  # the table's config is not this stack's
        raise DeploymentError(declared.file, declared.field, f"{type(stack).__name__} has "
                              f"{len(getattr(stack, family.layers))} decoder layers, its config says {n_layers}",
                              "report it (the family table reads the layer count from the wrong config for this class)")
    plan = declared.plan or plan_capture(declared.layer_ids, n_layers, where=declared.where)
    if pp_group.world_size > 1:
        policy.check_stage(plan.layer_ids, n_layers, stack.start_layer, stack.end_layer, pp_size=pp_group.world_size,
                           file=declared.file, field=declared.field)
    layers = list(plan.loop_indices)  # never loop index N: the last layer's output comes from the final-norm hook
    model.capture_aux_hidden_states = True
    stack.layers_to_capture = layers
    _set_layer_flags(stack, layers, family)
    from ...observe.dump import dump_from_env  # observability, imported where it is used

    dump = dump_from_env(_model_meta(plan, model, declared.where, family))
    # a list is counted and packed; a stream taken at the input norms is never the loop's own
    skip = plan.is_identity and family.container == PACKED and family.stream_from == STREAM_FROM_LOOP and dump is None
    _install_feed(stack, None if skip else _feed(plan, layers, dump, n_layers, family, stack))
    selfcheck.arm(stack, plan, family, num_hidden_layers=n_layers, where=declared.where)  # the third gate
    logger.info("eagle3-capture: %s feeds the draft layer ids %s (from %s) = loop indices %s%s, chunk order %s "
                "(tp_rank %s)", type(model).__name__, list(plan.layer_ids), declared.where, layers,
                "".join(t for t, on in ((" + the final norm's input", plan.captures_last_layer),
                                        (" + the final norm's output", plan.captures_final_norm),
                                        (" (each taken at its layer's input norm)",
                                         family.stream_from == STREAM_FROM_INPUT_NORM)) if on),
                list(plan.chunk_order), current_tp_rank())


def fed_layer_ids(target_model: Any) -> tuple[int, ...] | None:
    """The layer ids ``target_model`` (a causal LM, or a wrapper around one) feeds the draft's fc, in fc order;
    None when it captures nothing or its configuration was replaced behind the feed's back."""
    for module in target_model.modules():
        loop = getattr(module, "layers_to_capture", None)
        feed = getattr(module, "_eagle3_capture_feed", None)
        if feed is not None:
            return feed.fed_layer_ids(loop)
        if loop:
            return layer_ids_of_loop(loop, len(module.layers))
    return None


def ranks_agree(layer_ids: Any) -> None:
    """Refuse, on every TP rank, unless all ranks serve the same ids and manifest (:mod:`..ranks`). A collective:
    called once per configuration, before anything that could refuse on one rank only."""
    record = resolution.recorded()
    manifest = record.manifest if record is not None else None
    if isinstance(layer_ids, resolution.DeclaredLayerIds):
        mine = ranks.statement(layer_ids.layer_ids, layer_ids.file, layer_ids.field, manifest)
    else:
        mine = ranks.statement(None, manifest=manifest, stock=None if layer_ids is None else list(layer_ids))
    ranks.check(tp_all_gather(mine))


def _wrap_set_eagle3(original: Callable, family: Family) -> Callable:
    @functools.wraps(original)
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        ranks_agree(layer_ids)  # every TP rank, before either branch can refuse
        if isinstance(layer_ids, resolution.DeclaredLayerIds):
            return configure(self, layer_ids, family)
        stack = decoder_stack(self, family)
        _set_layer_flags(stack, [], family)  # stock wiring from a clean slate, not on top of an earlier configuration
        selfcheck.disarm(stack)  # nothing declared to check
        original(self, layer_ids)  # stock wiring (resolution warned when it matters)
        feed = None
        if _pp_group(self, family).is_last_rank:
            from ...observe.dump import dump_from_env

            dump = dump_from_env(_model_meta(None, self, "stock SGLang set_eagle3_layers_to_capture", family))
            n_layers = num_decoder_layers(self, family)
            feed = None if dump is None else _feed(None, stack.layers_to_capture, dump, n_layers, family, stack)
        _install_feed(stack, feed)

    return set_eagle3_layers_to_capture


def _wrap_forward(original: Callable) -> Callable:
    # The seam's probe checked the parameter names; look the three the feed needs up by position once.
    params = tuple(inspect.signature(original).parameters)[1:]
    where = tuple(params.index(n) for n in ("input_ids", "positions", "forward_batch"))

    @functools.wraps(original)
    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        feed = self._eagle3_capture_feed
        if feed is None or type(self).forward is not forward:  # reached through super().forward(): the
            return out  # class's own (wrapped) forward applies the feed, exactly once
        picked = [kwargs.get(params[i]) if i >= len(args) else args[i] for i in where]
        return feed(self, out, *picked)

    return forward


def _wrap_resolve(original: Callable) -> Callable:
    @functools.wraps(original)
    def init_spec_aux_hidden_state(self):
        if not self.is_draft_worker:
            switches.check_guards()  # a strict-mode or self-check value that does not read: refused at startup
        original(self)  # SGLang's own resolution: self.spec_aux_config
        from ...observe import sglang_report as setup_report  # observability, imported where it is used

        report = setup_report.at_resolution(self)  # the effective speculative setup, logged once per server
        config, server_args = self.spec_aux_config, self.server_args
        path = draft_model_path(server_args)
        unpatched = {f.name: _UNAVAILABLE.get(f.name) or status(f.name) for f in families.all_families()
                     if not is_patched(f.name)}
        declared = resolution.resolve_target_capture(
            config=config, server_args=server_args, model_config=self.model_config,
            spec_algorithm=self.spec_algorithm, is_draft_worker=self.is_draft_worker, draft_path=path,
            draft_hf_config=lambda: draft_hf_config(config, server_args, path), unpatched=unpatched)
        setup_report.refuse_if_strict(report)  # SGLANG_EAGLE3_CAPTURE_STRICT=1: a rewrite or contradiction
        if declared is not None:
            config.eagle_aux_hidden_state_layer_ids = declared  # configure_aux_hidden_state_capture hands it on

    return init_spec_aux_hidden_state


_FAMILY_WRAPPERS: dict[str, Callable[[Any, Family], Any]] = {
    "target.set_eagle3": _wrap_set_eagle3,
    "target.forward": lambda original, family: _wrap_forward(original),
    "target.feed_slot": lambda original, family: None,
}


def resolution_patch(release: Release) -> seams.Patch:
    """The release's resolution seam, patched on its own: without it nothing can be refused by family."""
    return seams.Patch("target.resolve", (release.seam("resolve"),), lambda seam, original: _wrap_resolve(original))


def family_patch(family: Family, release: Release | None = None) -> seams.Patch:
    """One family's capture patch: its causal LMs' ``set_eagle3_layers_to_capture`` (less those ``release`` lacks,
    its ``absent_hooks``) and its decoder stacks' ``forward`` (and feed slot), all or nothing."""
    absent = release.absent_hooks if release is not None else ()
    return seams.Patch(f"target.{family.name}", family.seams(absent),
                       lambda seam, original: _FAMILY_WRAPPERS[seam.role](original, family))


def present_families(release: Release) -> tuple[Family, ...]:
    """Every family whose model files ``release`` has (not in its ``absent_families``)."""
    return tuple(f for f in families.all_families() if f.name not in release.absent_families)


def patches_for(release: Release, family_list: tuple[Family, ...] = ()) -> tuple[seams.Patch, ...]:
    """The resolution patch of ``release``, then one patch per family of ``family_list`` (default: every family the
    release has)."""
    return (resolution_patch(release), *(family_patch(f, release) for f in family_list or present_families(release)))


def _patches(family: str | None = None) -> tuple[seams.Patch, ...]:
    resolve, *rest = patches_for(releases.installed_or_newest())
    return (resolve, *(p for p in rest if family is None or p.name == f"target.{family}"))


def is_patched(family: str | None = None) -> bool:
    """True when the resolution seam and every family's (or ``family``'s) seams are patched (imports nothing)."""

    patches = _patches(family)
    return len(patches) > 1 and all(seams.is_applied(p) for p in patches)


def unavailable(family: str) -> str | None:
    """Why ``family``'s patch could not be applied in this process, or None."""
    return _UNAVAILABLE.get(family)


def status(family: str | None = None) -> str:
    """``name=patched|original`` for each target seam (``family``: the resolution seam and that family's)."""
    return ", ".join(seams.status(p) for p in _patches(family))


def describe() -> str:
    """The patched attributes, in one line."""
    return "; ".join(seams.describe(p) for p in _patches() if seams.is_applied(p))


def apply() -> bool:
    """Install the target capture patch; False when it was already installed. Raises when the resolution seam does
    not fit (the plugin then arms its startup guard); a family that cannot be patched is logged and recorded."""
    release = releases.check_sglang_version()
    resolve, *rest = patches_for(release)
    applied = seams.apply(resolve)
    for name in release.absent_families:  # nothing to patch: SGLang itself cannot build these architectures here
        _UNAVAILABLE[name] = (f"SGLang {release.version} has no model file for it, or none with an EAGLE-3 hook "
                              "(added in a later release)")
    for family, patch in zip(present_families(release), rest):
        try:
            applied = seams.apply(patch) or applied
        except Exception as e:  # noqa: BLE001 - one family's import error or changed seam must not disable the others
            _UNAVAILABLE[family.name] = f"{type(e).__name__}: {e}"
            logger.error("eagle3-capture: the %s family is NOT patched (%s); a draft that declares layer ids on %s is "
                         "refused at startup, the other families are patched", family.name, _UNAVAILABLE[family.name],
                         ", ".join(family.architectures))
        else:
            _UNAVAILABLE.pop(family.name, None)
    return applied


def revert() -> None:
    """Put back exactly the attributes :func:`apply` replaced and remove the hooks of the feeds it installed (their
    ``_eagle3_capture_feed`` instance attributes stay; SGLang's own forward never reads them)."""
    for feed in list(_FEEDS):
        feed.detach()
    _FEEDS.clear()
    _UNAVAILABLE.clear()
    selfcheck.disarm()
    for patch in reversed(_patches()):
        seams.revert(patch)


@contextmanager
def patched() -> Iterator[None]:
    """``with patched(): ...`` applies the patch for the block and reverts it after (if it applied it)."""
    applied = apply()
    try:
        yield
    finally:
        if applied:
            revert()
