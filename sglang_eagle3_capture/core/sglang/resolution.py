"""WHERE the target's layer ids come from: SGLang's facts read once per process, decided by the policy, recorded.

The first runtime gate (docs/how-it-works.md, which gives the order of authority: manifest, marked ``eagle_config``
ids, else stock wiring with a WARNING). What is refused is :mod:`..policy`'s decision, the one ``inspect`` reports;
this module hands SGLang's objects to :mod:`..launch`. The ids go on as :class:`DeclaredLayerIds`, and the manifest
is read once per process (:func:`recorded`; the draft side reads that record).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import launch, policy, releases
from ..capture import CapturePlan, plan_capture
from ..config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION
from ..errors import DeploymentError
from ..logs import get_logger
from ..manifest import MANIFEST_FILENAME, WRITE_HINT, Manifest, find_manifest
from ..releases.schema import Release

logger = get_logger(__name__)

__all__ = ["CONVENTION_KEY", "IDS_KEY", "LAYER_ID_CONVENTION", "DeclaredLayerIds", "Resolution",
           "recorded", "resolve_target_capture"]


class DeclaredLayerIds:
    """Layer ids (fc order) from ``file``/``field``, handed from the resolution to the patched
    ``set_eagle3_layers_to_capture`` in SGLang's ``SpecAuxHiddenStateConfig.eagle_aux_hidden_state_layer_ids``.

    Part of the configure gate: it is not a list, so only :func:`.target.configure` can use it; an unpatched
    ``set_eagle3_layers_to_capture`` (a model class the family table does not list) fails on its first use instead of
    reinterpreting the ids with SGLang's heuristic, even with the self-check turned off.
    """

    __slots__ = ("layer_ids", "file", "field", "plan", "family")

    def __init__(self, layer_ids, file: str, field: str | None = None, plan: CapturePlan | None = None,
                 family: str | None = None) -> None:
        self.layer_ids = tuple(layer_ids)
        self.file, self.field = file, field
        self.plan = plan  # built by resolve_target_capture; None: the patched set_eagle3 builds it
        self.family = family  # the target's family (resolve_target_capture); None: whichever patch receives it

    @property
    def where(self) -> str:
        """``FILE: field 'FIELD'`` (``FILE`` without a field) for log lines and the dump's metadata."""
        return self.file if self.field is None else f"{self.file}: field '{self.field}'"

    def _refuse(self, *args: Any) -> Any:
        raise DeploymentError(self.file, self.field, f"layer ids {list(self.layer_ids)} reached an unpatched "
                              "set_eagle3_layers_to_capture (the capture patch is not active for this model class), "
                              "which would reinterpret them with SGLang's heuristic", "look for 'eagle3_capture' "
                              "errors in the log of this process, check `pip show sglang-eagle3-capture` and that "
                              "SGLANG_PLUGINS (if set) includes eagle3_capture")

    __bool__ = __len__ = __iter__ = __getitem__ = _refuse

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeclaredLayerIds) and other.layer_ids == self.layer_ids

    def __hash__(self) -> int:
        return hash(self.layer_ids)

    def __repr__(self) -> str:
        return f"DeclaredLayerIds({list(self.layer_ids)}, {self.where!r})"


@dataclass(frozen=True)
class Resolution:
    """What this process's target resolution read, recorded once (:func:`recorded`): ``manifest`` is the draft's
    manifest as read then (None when it has none or is not a local directory)."""

    draft_path: str
    draft_dir: Path | None
    manifest: Manifest | None


_RECORD: list[Resolution] = []  # at most one: the target ModelRunner of this process


def recorded() -> Resolution | None:
    """The resolution of this process's target, or None when none ran through the capture patch."""
    return _RECORD[-1] if _RECORD else None


def _pp_indices(*args: int) -> Any:
    from sglang.srt.distributed.utils import get_pp_indices

    return get_pp_indices(*args)


def resolve_target_capture(*, config: Any, server_args: Any, model_config: Any, spec_algorithm: Any,
                           is_draft_worker: bool, draft_path: str | None, draft_hf_config: Callable[[], Any],
                           release: Release | None = None,
                           unpatched: Mapping[str, str] | None = None) -> DeclaredLayerIds | None:
    """Which layer ids the target must capture (None: stock wiring), refusing what the policy refuses; recorded.
    Called by the patched resolution seam after SGLang's own resolution filled ``config``; ``unpatched`` maps a
    family name to why its capture patch is not active in this process."""
    if is_draft_worker or not draft_path or not (spec_algorithm.is_eagle() or spec_algorithm.is_standalone()):
        return None
    draft_hf = draft_hf_config()
    if draft_hf is None:
        return None
    draft_dir = Path(draft_path) if Path(draft_path).is_dir() else None
    manifest = find_manifest(draft_dir) if draft_dir is not None else None
    release = release or releases.installed_or_newest()
    served = launch.read_launch(server_args, release, algorithm=getattr(spec_algorithm, "name", None))
    launch.check_launch(served)
    d = launch.deployment(served, release=release, draft_path=draft_path, manifest=manifest, draft_config=draft_hf,
                          target_config=model_config.hf_config, use_aux_hidden_state=config.eagle_use_aux_hidden_state,
                          pp_indices=_pp_indices, unpatched=unpatched)
    decision = policy.decide(d)
    if decision.family is None:
        return None
    _RECORD[:] = [Resolution(draft_path, draft_dir, manifest)]
    if draft_dir is None:
        logger.warning("eagle3-capture: cannot look for %s: the draft path %s is not a local directory; only marked "
                       "eagle_config ids are honoured. Fix: download the draft and pass its local directory",
                       MANIFEST_FILENAME, draft_path)
    if decision.layer_ids is None:
        logger.warning("eagle3-capture: draft %s has no %s and no eagle_config.%s; running stock wiring: %s. A draft "
                       "trained on other hidden states loses its acceptance silently. Fix: `%s`", draft_path,
                       MANIFEST_FILENAME, CONVENTION_KEY, decision.stock, WRITE_HINT)
        return None
    where = f"{decision.file}: field '{decision.field}'"
    plan = plan_capture(decision.layer_ids, d.num_hidden_layers, where=where)
    return DeclaredLayerIds(decision.layer_ids, decision.file, decision.field, plan, decision.family.name)
