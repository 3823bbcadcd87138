"""HOW the capture is installed: apply / revert / is_patched over a table of recorded originals.

Four attributes of SGLang 0.5.23 are replaced (:data:`TARGETS`); each replacement wraps the original:

- ``spec_aux_hidden_state._resolve_eagle_aux_hidden_state`` (module function, looked up by name in
  ``resolve_spec_aux_hidden_state_config``): after SGLang's own resolution, ask
  :func:`sglang_eagle3_capture.wiring.resolve_target_capture` for the ids and refuse bad deployments;
- ``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture``: translate :class:`~.wiring.DeclaredLayerIds`
  through :func:`~.capture.plan_capture` instead of SGLang's ``layer_ids[0] == 1`` heuristic. V3, V32
  (empty subclasses) and Kimi-K2.5 (its ``set_eagle3_layers_to_capture`` delegates to its
  ``language_model``, a ``DeepseekV3ForCausalLM``) inherit it, so a registry override is not needed;
- ``DeepseekV2Model.forward``: hand the model's output to its :class:`~.capture.FcFeed`, which puts the
  packed chunks (and the last layer's output, taken by a forward hook on the model's final ``norm``
  instance) in fc order;
- ``DeepseekV2Model._eagle3_capture_feed``: a new class attribute, ``None`` (no feed: nothing extra runs).

Patching class attributes reaches every ``from ... import`` binding; :func:`revert` puts back exactly
what was there (or deletes what was absent).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import sys
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from . import capture, wiring
from .dump import dump_from_env
from .layer_ids import layer_id_of_index

logger = logging.getLogger(__name__)

_ABSENT = object()
_MARK = "__eagle3_capture__"
# (owner object, attribute) -> the original value (or _ABSENT).
_ORIGINALS: dict[tuple[Any, str], Any] = {}
# Feeds installed on live models; revert() detaches their final-norm hooks (instance state, not a class's).
_FEEDS: "weakref.WeakSet[capture.FcFeed]" = weakref.WeakSet()

SPEC_AUX = "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state"
DEEPSEEK = "sglang.srt.models.deepseek_v2"


class PatchError(RuntimeError):
    """The installed SGLang does not have the shape the capture patch was written against."""


def current_tp_rank() -> int | None:
    """This process's TP rank from SGLang's runtime context, or None before SGLang publishes it."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return get_parallel().tp_rank
    except (ImportError, AttributeError, ValueError, RuntimeError):
        return None


def _model_meta(plan: capture.CapturePlan | None, model: Any, where: str) -> dict:
    loop = list(model.model.layers_to_capture)
    if plan is None:
        ids, order, last = [layer_id_of_index(i) for i in sorted(loop)], list(range(len(loop))), False
    else:
        ids, order, last = list(plan.layer_ids), list(plan.chunk_order), plan.captures_last_layer
    return {"layer_ids": ids, "loop_indices": loop, "last_layer_at_final_norm": last, "chunk_order": order,
            "source": where, "model_class": type(model).__name__, "tp_rank": current_tp_rank(),
            "pp_rank": getattr(model.pp_group, "rank_in_group", None)}


def _install_feed(model: Any, feed: capture.FcFeed | None) -> None:
    """Make ``feed`` the model's ``_eagle3_capture_feed``, detaching the one it replaces."""
    old = vars(model.model).get("_eagle3_capture_feed")
    if old is not None:
        old.detach()
    if feed is not None:
        feed.attach(model.model)
        _FEEDS.add(feed)
    model.model._eagle3_capture_feed = feed


def _configure(model: Any, declared: wiring.DeclaredLayerIds) -> None:
    if not model.pp_group.is_last_rank:  # as stock: only the last stage captures
        return
    plan = capture.plan_capture(declared.layer_ids, model.config.num_hidden_layers, where=declared.where)
    if model.pp_group.world_size > 1:
        capture.check_stage(plan, model.model.start_layer, model.model.end_layer, pp_size=model.pp_group.world_size)
    layers = list(plan.loop_indices)
    model.capture_aux_hidden_states = True
    model.model.layers_to_capture = layers
    dump = dump_from_env(_model_meta(plan, model, declared.where))
    _install_feed(model, None if plan.is_identity and dump is None else capture.FcFeed(plan, layers, dump))
    logger.info("eagle3-capture: %s feeds the draft layer ids %s (from %s) = loop indices %s%s, chunk order %s "
                "(tp_rank %s)", type(model).__name__, list(plan.layer_ids), declared.where, layers,
                " + the final norm's input" if plan.captures_last_layer else "", list(plan.chunk_order),
                current_tp_rank())


def _make_set_eagle3(original: Callable) -> Callable:
    @functools.wraps(original)
    def set_eagle3_layers_to_capture(self, layer_ids=None):
        if isinstance(layer_ids, wiring.DeclaredLayerIds):
            return _configure(self, layer_ids)
        original(self, layer_ids)  # stock wiring (wiring.resolve_target_capture warned when it matters)
        feed = None
        if self.pp_group.is_last_rank:
            dump = dump_from_env(_model_meta(None, self, "stock SGLang set_eagle3_layers_to_capture"))
            feed = None if dump is None else capture.FcFeed(None, self.model.layers_to_capture, dump)
        _install_feed(self, feed)

    return set_eagle3_layers_to_capture


def _make_model_forward(original: Callable) -> Callable:
    @functools.wraps(original)
    def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
        out = original(self, input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)
        feed = self._eagle3_capture_feed
        if feed is None:
            return out
        return feed(self, out, input_ids, positions, forward_batch)

    return forward


def _make_resolve(original: Callable) -> Callable:
    @functools.wraps(original)
    def _resolve_eagle_aux_hidden_state(*, config, server_args, model_config, spec_algorithm, is_draft_worker):
        original(config=config, server_args=server_args, model_config=model_config, spec_algorithm=spec_algorithm,
                 is_draft_worker=is_draft_worker)
        from sglang.srt.runtime_context import get_spec

        declared = wiring.resolve_target_capture(
            config=config, server_args=server_args, model_config=model_config, spec_algorithm=spec_algorithm,
            is_draft_worker=is_draft_worker, draft_path=get_spec().speculative_draft_model_path)
        if declared is None:
            return
        if not is_patched():
            raise wiring.WiringError(f"{declared.where}: the draft declares layer ids {list(declared.layer_ids)} but "
                                     f"the sglang-eagle3-capture capture patch is incomplete in this process ({status()}); "
                                     "fix: reinstall sglang-eagle3-capture and check the log for 'eagle3_capture' errors")
        config.eagle_aux_hidden_state_layer_ids = declared

    return _resolve_eagle_aux_hidden_state


@dataclass(frozen=True)
class Target:
    """One attribute the patch replaces: ``module.owner.attr`` (``owner`` None: a module attribute)."""

    module: str
    owner: str | None
    attr: str
    make: Callable[[Any], Any]  # original (or _ABSENT) -> replacement
    params: tuple[str, ...] | None  # expected parameter names of the original (None: not a function)

    @property
    def name(self) -> str:
        """``Owner.attr`` or ``module.attr``, for logs."""
        return f"{self.owner or self.module.rsplit('.', 1)[-1]}.{self.attr}"


TARGETS: tuple[Target, ...] = (
    Target(SPEC_AUX, None, "_resolve_eagle_aux_hidden_state", _make_resolve,
           ("config", "server_args", "model_config", "spec_algorithm", "is_draft_worker")),
    Target(DEEPSEEK, "DeepseekV2ForCausalLM", "set_eagle3_layers_to_capture", _make_set_eagle3, ("self", "layer_ids")),
    Target(DEEPSEEK, "DeepseekV2Model", "forward", _make_model_forward,
           ("self", "input_ids", "positions", "forward_batch", "input_embeds", "pp_proxy_tensors")),
    Target(DEEPSEEK, "DeepseekV2Model", "_eagle3_capture_feed", lambda original: None, None),
)


def _owner(target: Target, *, import_: bool) -> Any:
    module = importlib.import_module(target.module) if import_ else sys.modules.get(target.module)
    if module is None or target.owner is None:
        return module
    return getattr(module, target.owner, None)


def _probe(target: Target, owner: Any) -> Any:
    """The original value, checked against the shape the replacement was written for."""
    if owner is None:
        raise PatchError(f"{target.module}.{target.owner} does not exist in this SGLang")
    original = vars(owner).get(target.attr, _ABSENT)
    if target.params is None:
        if original is not _ABSENT:
            raise PatchError(f"{target.name} already exists in this SGLang; the patch would shadow it")
        return original
    if not inspect.isfunction(original):
        raise PatchError(f"{target.name} is not a function defined there in this SGLang")
    if tuple(inspect.signature(original).parameters) != target.params:
        raise PatchError(f"{target.name} has parameters {tuple(inspect.signature(original).parameters)}, the patch "
                         f"was written for {target.params}")
    return original


def _mark(value: Any) -> Any:
    if value is not None:
        setattr(value, _MARK, True)
    return value


def _is_ours(target: Target, owner: Any) -> bool:
    value = vars(owner).get(target.attr, _ABSENT) if owner is not None else _ABSENT
    if target.params is None:
        return (owner, target.attr) in _ORIGINALS and value is None
    return getattr(value, _MARK, False) is True


def is_patched() -> bool:
    """True when every attribute in :data:`TARGETS` holds this package's replacement (imports nothing)."""
    return all(_is_ours(t, _owner(t, import_=False)) for t in TARGETS)


def status() -> str:
    """``name=patched|original`` for each target, for logs and errors."""
    return ", ".join(f"{t.name}={'patched' if _is_ours(t, _owner(t, import_=False)) else 'original'}" for t in TARGETS)


def describe() -> str:
    """The patched attributes, in one line."""
    return ", ".join(t.name for t in TARGETS)


def apply() -> bool:
    """Install the capture patch (importing SGLang's modules); False when it was already installed.

    All targets are probed before any is replaced, so a :class:`PatchError` leaves SGLang untouched.

    Example::

        >>> apply(); is_patched(); revert()  # doctest: +SKIP
    """
    if is_patched():
        return False
    if _ORIGINALS:
        revert()  # a partial or guard-only state: start from SGLang's own attributes
    owners = [_owner(t, import_=True) for t in TARGETS]
    originals = [_probe(t, o) for t, o in zip(TARGETS, owners)]
    for target, owner, original in zip(TARGETS, owners, originals):
        _ORIGINALS[(owner, target.attr)] = original
        setattr(owner, target.attr, _mark(target.make(original)))
    return True


def apply_guard(reason: str) -> bool:
    """When the capture patch cannot be applied: make target resolution refuse EAGLE-3 on DeepSeek-family targets.

    Replaces only ``_resolve_eagle_aux_hidden_state`` (when it exists with the expected signature), so such a
    deployment fails at startup, naming ``reason`` and the fix, instead of running stock wiring. Returns
    False when the seam is missing.
    """
    target = TARGETS[0]
    owner = _owner(target, import_=True)
    try:
        original = _probe(target, owner)
    except PatchError as e:
        logger.error("eagle3-capture: cannot install the startup guard either: %s", e)
        return False

    @functools.wraps(original)
    def guard(*, config, server_args, model_config, spec_algorithm, is_draft_worker):
        original(config=config, server_args=server_args, model_config=model_config, spec_algorithm=spec_algorithm,
                 is_draft_worker=is_draft_worker)
        if is_draft_worker or not spec_algorithm.is_eagle3() or config.draft_model_config is None:
            return
        arch = (getattr(model_config.hf_config, "architectures", None) or ["?"])[0]
        if arch in wiring.DEEPSEEK_V2_FAMILY:
            raise wiring.WiringError(
                f"sglang-eagle3-capture refuses EAGLE-3 on {arch}: {reason}; its capture patch is not applied, so "
                "the draft would get stock wiring. Fix: the above, or exclude the plugin (SGLANG_PLUGINS without "
                "eagle3_capture) to run stock wiring knowingly")

    _ORIGINALS.setdefault((owner, target.attr), original)
    setattr(owner, target.attr, guard)
    return True


def revert() -> None:
    """Put back exactly the attributes :func:`apply` (or :func:`apply_guard`) replaced, and remove the
    final-norm hooks of the feeds it installed on live models (their ``_eagle3_capture_feed`` instance
    attributes stay; SGLang's own forward never reads them)."""
    for feed in list(_FEEDS):
        feed.detach()
    _FEEDS.clear()
    for (owner, attr), original in list(_ORIGINALS.items()):
        if original is _ABSENT:
            if attr in vars(owner):
                delattr(owner, attr)
        else:
            setattr(owner, attr, original)
    _ORIGINALS.clear()


@contextmanager
def patched() -> Iterator[None]:
    """``with patched(): ...`` applies the patch for the block and reverts it after (if it applied it)."""
    applied = apply()
    try:
        yield
    finally:
        if applied:
            revert()
