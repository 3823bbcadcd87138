"""The target side of the capture patch: which seams, what replaces them, and how a model is configured.

For the installed release (:mod:`sglang_eagle3_capture.releases`) and every target family
(:mod:`sglang_eagle3_capture.families`), through the one patch engine (:mod:`.seams`):

- the release's resolution seam (``ModelRunner.init_spec_aux_hidden_state``, before the model loads): after
  SGLang's own resolution, ask
  :func:`.resolution.resolve_target_capture` for the ids and refuse bad deployments;
- each family's ``set_eagle3_layers_to_capture``: install a :class:`~.resolution.DeclaredLayerIds`'s
  :class:`~.capture.CapturePlan` instead of SGLang's reading of the ids (subclasses and wrappers that
  delegate to it, e.g. DeepSeek-V3 and Kimi-K2.5, inherit it);
- each family's decoder-stack ``forward``: hand its output to the model's :class:`~.capture.FcFeed`,
  which puts the captures (and the last layer's output, taken by a forward hook on the final norm
  instance) in fc order;
- a new class attribute ``_eagle3_capture_feed`` on the decoder stack, ``None`` (no feed: nothing extra runs).
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .. import families, releases
from ..errors import WiringError
from ..families import Family
from ..layer_ids import layer_ids_of_loop
from ..releases.schema import Release, Seam
from . import resolution, seams
from .capture import CapturePlan, FcFeed, check_stage, plan_capture
from .dump import dump_from_env
from .runtime import current_tp_rank, draft_hf_config, draft_model_path

logger = logging.getLogger(__name__)

# Feeds installed on live models; revert() detaches their final-norm hooks (instance state, not a class's).
_FEEDS: "weakref.WeakSet[FcFeed]" = weakref.WeakSet()


def _model_meta(plan: CapturePlan | None, model: Any, where: str) -> dict:
    loop = list(model.model.layers_to_capture)
    if plan is None:
        ids = list(layer_ids_of_loop(loop, model.config.num_hidden_layers))
        order, last = list(range(len(ids))), False
    else:
        ids, order, last = list(plan.layer_ids), list(plan.chunk_order), plan.captures_last_layer
    return {"layer_ids": ids, "loop_indices": loop, "last_layer_at_final_norm": last, "chunk_order": order,
            "source": where, "model_class": type(model).__name__, "tp_rank": current_tp_rank(),
            "pp_rank": getattr(model.pp_group, "rank_in_group", None)}


def _install_feed(model: Any, feed: FcFeed | None) -> None:
    """Make ``feed`` the decoder stack's ``_eagle3_capture_feed``, detaching the one it replaces."""
    old = vars(model.model).get("_eagle3_capture_feed")
    if old is not None:
        old.detach()
    if feed is not None:
        feed.attach(model.model)
        _FEEDS.add(feed)
    model.model._eagle3_capture_feed = feed


def configure(model: Any, declared: resolution.DeclaredLayerIds) -> None:
    """Make ``model`` (a family's causal LM) feed the draft exactly ``declared``'s layer ids, in their order."""
    if not model.pp_group.is_last_rank:  # as stock: only the last stage captures
        return
    n_layers = model.config.num_hidden_layers
    plan = declared.plan or plan_capture(declared.layer_ids, n_layers, where=declared.where)
    if model.pp_group.world_size > 1:
        check_stage(plan, model.model.start_layer, model.model.end_layer, pp_size=model.pp_group.world_size)
    layers = list(plan.loop_indices)
    model.capture_aux_hidden_states = True
    model.model.layers_to_capture = layers
    dump = dump_from_env(_model_meta(plan, model, declared.where))
    feed = None if plan.is_identity and dump is None else FcFeed(plan, layers, dump, n_layers)
    _install_feed(model, feed)
    logger.info("eagle3-capture: %s feeds the draft layer ids %s (from %s) = loop indices %s%s, chunk order %s "
                "(tp_rank %s)", type(model).__name__, list(plan.layer_ids), declared.where, layers,
                " + the final norm's input" if plan.captures_last_layer else "", list(plan.chunk_order),
                current_tp_rank())


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


def _wrap_set_eagle3(original: Callable) -> Callable:
    @functools.wraps(original)
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if isinstance(layer_ids, resolution.DeclaredLayerIds):
            return configure(self, layer_ids)
        original(self, layer_ids)  # stock wiring (resolution warned when it matters)
        feed = None
        if self.pp_group.is_last_rank:
            dump = dump_from_env(_model_meta(None, self, "stock SGLang set_eagle3_layers_to_capture"))
            feed = None if dump is None else FcFeed(None, self.model.layers_to_capture, dump,
                                                    self.config.num_hidden_layers)
        _install_feed(self, feed)

    return set_eagle3_layers_to_capture


def _wrap_forward(original: Callable) -> Callable:
    # The seam's probe checked the parameter names; look the three the feed needs up by position once.
    params = tuple(inspect.signature(original).parameters)[1:]
    where = tuple(params.index(n) for n in ("input_ids", "positions", "forward_batch"))

    @functools.wraps(original)
    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        feed = self._eagle3_capture_feed
        if feed is None:
            return out
        picked = [kwargs.get(params[i]) if i >= len(args) else args[i] for i in where]
        return feed(self, out, *picked)

    return forward


def _wrap_resolve(original: Callable) -> Callable:
    @functools.wraps(original)
    def init_spec_aux_hidden_state(self):
        original(self)  # SGLang's own resolution: self.spec_aux_config
        config, server_args = self.spec_aux_config, self.server_args
        path = draft_model_path(server_args)
        declared = resolution.resolve_target_capture(
            config=config, server_args=server_args, model_config=self.model_config,
            spec_algorithm=self.spec_algorithm, is_draft_worker=self.is_draft_worker, draft_path=path,
            draft_hf_config=lambda: draft_hf_config(config, server_args, path))
        if declared is None:
            return
        if not is_patched():
            raise WiringError(f"{declared.where}: the draft declares layer ids {list(declared.layer_ids)} but the "
                              f"sglang-eagle3-capture capture patch is incomplete in this process ({status()}); fix: "
                              "reinstall sglang-eagle3-capture and check the log for 'eagle3_capture' errors")
        config.eagle_aux_hidden_state_layer_ids = declared  # configure_aux_hidden_state_capture hands it on

    return init_spec_aux_hidden_state


_WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "resolve": _wrap_resolve,
    "target.set_eagle3": _wrap_set_eagle3,
    "target.forward": _wrap_forward,
    "target.feed_slot": lambda original: None,
}


def _wrap(seam: Seam, original: Any) -> Any:
    return _WRAPPERS[seam.role](original)


def patch_for(release: Release, family_list: tuple[Family, ...] = ()) -> seams.Patch:
    """The target capture patch of ``release`` over ``family_list`` (default: every family)."""
    family_list = family_list or families.all_families()
    return seams.Patch("target", (release.seam("resolve"), *(s for f in family_list for s in f.seams())), _wrap)


def _patch() -> seams.Patch:
    return patch_for(releases.installed_or_newest())


def is_patched() -> bool:
    """True when every target seam holds this package's replacement (imports nothing)."""
    return seams.is_applied(_patch())


def status() -> str:
    """``name=patched|original`` for each target seam, for logs and errors."""
    return seams.status(_patch())


def describe() -> str:
    """The patched attributes, in one line."""
    return seams.describe(_patch())


def apply() -> bool:
    """Install the target capture patch (importing SGLang's modules); False when it was already installed.

    Example::

        >>> apply(); is_patched(); revert()  # doctest: +SKIP
    """
    return seams.apply(patch_for(releases.check_sglang_version()))


def revert() -> None:
    """Put back exactly the attributes :func:`apply` replaced, and remove the
    final-norm hooks of the feeds it installed on live models (their ``_eagle3_capture_feed`` instance
    attributes stay; SGLang's own forward never reads them)."""
    for feed in list(_FEEDS):
        feed.detach()
    _FEEDS.clear()
    seams.revert(_patch())


@contextmanager
def patched() -> Iterator[None]:
    """``with patched(): ...`` applies the patch for the block and reverts it after (if it applied it)."""
    applied = apply()
    try:
        yield
    finally:
        if applied:
            revert()
