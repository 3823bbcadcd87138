"""WHERE the target's layer ids come from, what is refused at startup, and the per-process record of it.

SGLang takes the target's capture ids only from the draft config's
``eagle_config["eagle_aux_hidden_state_layer_ids"]``, while the target ``ModelRunner`` is built, before
the model is loaded (the release table names the seam). The capture patch wraps that seam and asks
:func:`resolve_target_capture` which ids to capture, in this order of authority:

1. the draft's ``eagle3_manifest.json`` (:func:`sglang_eagle3_capture.manifest.find_manifest`);
2. ``eagle_config.eagle_aux_hidden_state_layer_ids`` when ``eagle_config`` also carries
   ``"eagle_aux_hidden_state_layer_ids_convention": "sglang-eagle3-capture/layer-id"``;
3. neither: stock SGLang wiring, with a WARNING naming what stock SGLang captures and the fix.

A manifest and a config that disagree are an error. Ids are handed on as :class:`DeclaredLayerIds`
(carrying the :class:`~.capture.CapturePlan`, built once), which the patched
``set_eagle3_layers_to_capture`` installs. The manifest is read once per process: the outcome is
recorded (:func:`recorded`) and the draft side reads that record instead of the files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import releases
from ..config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION
from ..errors import LayerIdError, ManifestError, WiringError
from ..families import Family, all_families, family_of
from ..layer_ids import EMBEDDING_LAYER_ID, hidden_state_indices
from ..manifest import MANIFEST_FILENAME, WRITE_HINT, Manifest, check_target, find_manifest
from ..readings import stock_sglang_capture
from ..releases.schema import Release
from ..target_config import architecture, cfg_get, target_dims
from ..userfiles import brief
from .capture import CapturePlan, check_stage, plan_capture

logger = logging.getLogger(__name__)

__all__ = ["CONVENTION_KEY", "IDS_KEY", "LAYER_ID_CONVENTION", "DeclaredLayerIds", "Resolution", "WiringError",
           "declared_layer_ids", "recorded", "resolve_target_capture"]


class DeclaredLayerIds:
    """Layer ids (fc order) handed from the patched resolution to the patched ``set_eagle3_layers_to_capture``.

    It travels in SGLang's ``SpecAuxHiddenStateConfig.eagle_aux_hidden_state_layer_ids``. It is
    deliberately not a list: if an unpatched ``set_eagle3_layers_to_capture`` receives it, its first use
    (``bool``, indexing, iteration) raises instead of letting SGLang's heuristic reinterpret the ids.
    """

    __slots__ = ("layer_ids", "where", "plan", "family")

    def __init__(self, layer_ids, where: str, plan: CapturePlan | None = None, family: str | None = None) -> None:
        self.layer_ids = tuple(layer_ids)
        self.where = where
        self.plan = plan  # built by resolve_target_capture; None: the patched set_eagle3 builds it
        self.family = family  # the target's family (resolve_target_capture); None: whichever patch receives it

    def _refuse(self, *args: Any) -> Any:
        raise WiringError(
            f"{self.where}: layer ids {list(self.layer_ids)} reached an unpatched set_eagle3_layers_to_capture "
            "(the sglang-eagle3-capture capture patch is not active for this model class), which would "
            "reinterpret them with SGLang's layer_ids[0] == 1 heuristic. Fix: look for 'eagle3_capture' errors "
            "in the log of this process, check `pip show sglang-eagle3-capture` and that SGLANG_PLUGINS "
            "(if set) includes eagle3_capture"
        )

    __bool__ = __len__ = __iter__ = __getitem__ = _refuse

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeclaredLayerIds) and other.layer_ids == self.layer_ids

    def __hash__(self) -> int:
        return hash(self.layer_ids)

    def __repr__(self) -> str:
        return f"DeclaredLayerIds({list(self.layer_ids)}, where={self.where!r})"


def _eagle_config(draft_hf_config: Any) -> Mapping | None:
    ec = cfg_get(draft_hf_config, "eagle_config")
    if ec is None or isinstance(ec, Mapping):
        return ec
    return {k: v for k, v in vars(ec).items() if not k.startswith("_")}


def is_eagle3_draft(draft_hf_config: Any, draft_dir: Path | None) -> bool:
    """True for an EAGLE-3 draft: an ``*Eagle3*`` architecture, a manifest, or marked eagle_config ids."""
    archs = cfg_get(draft_hf_config, "architectures") or []
    ec = _eagle_config(draft_hf_config)
    return (any("Eagle3" in str(a) for a in archs) or (ec is not None and CONVENTION_KEY in ec)
            or (draft_dir is not None and (draft_dir / MANIFEST_FILENAME).is_file()))


def declared_layer_ids(draft_dir: Path | None, draft_hf_config: Any, target_hf_config: Any, *,
                       manifest: Manifest | None = None) -> DeclaredLayerIds | None:
    """The layer ids the draft declares (its manifest, else marked eagle_config ids), or None for stock wiring.

    ``manifest``: the draft's manifest when the caller already read it (else it is read from ``draft_dir``).
    """
    cfg_file = f"{draft_dir / 'config.json' if draft_dir is not None else 'draft config.json'}"
    ec = _eagle_config(draft_hf_config)
    cfg_ids = None
    cfg_where = f"{cfg_file}: field 'eagle_config.{IDS_KEY}'"
    if ec is not None and CONVENTION_KEY in ec:
        if ec[CONVENTION_KEY] != LAYER_ID_CONVENTION:
            raise WiringError(f"{cfg_file}: field 'eagle_config.{CONVENTION_KEY}' is {brief(ec[CONVENTION_KEY])}; "
                              f"fix: set it to {LAYER_ID_CONVENTION!r} (ids are layer ids: -1 = embedding, k = output "
                              "of layer k) or remove it")
        cfg_ids = ec.get(IDS_KEY)
        if not isinstance(cfg_ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in cfg_ids):
            raise WiringError(f"{cfg_where}: expected a list of integer layer ids next to '{CONVENTION_KEY}', got "
                              f"{brief(cfg_ids)}; fix: list the layers the fc consumes, in fc order, e.g. [-1, 2, 30]")
        cfg_ids = tuple(cfg_ids)
    if manifest is None and draft_dir is not None:
        manifest = find_manifest(draft_dir)
    if manifest is None:
        return None if cfg_ids is None else DeclaredLayerIds(cfg_ids, cfg_where)
    check_target(manifest, target_hf_config, where="target config (--model-path)")
    mwhere = f"{manifest.path}: field 'layer_ids'"
    if cfg_ids is not None and cfg_ids != manifest.layer_ids:
        raise WiringError(f"{mwhere} is {list(manifest.layer_ids)} but {cfg_where} is {list(cfg_ids)} (marked as layer "
                          "ids); fix: make them equal (the manifest is what the fc was trained on) or remove the ids "
                          "from eagle_config")
    if cfg_ids is None and ec is not None and IDS_KEY in ec:
        arch, n, _ = target_dims(target_hf_config, "target config")
        stock = stock_sglang_capture({"eagle_config": dict(ec)}, n, family=_family(arch),
                                     release=releases.installed_or_newest())
        want = sorted(hidden_state_indices(manifest.layer_ids))
        if stock.problem or sorted(stock.loop_indices) != want:
            raise WiringError(
                f"{mwhere} is {list(manifest.layer_ids)} (loop indices {want}), but {cfg_where} means something else "
                f"to SGLang: {stock.describe()}; fix: set eagle_config.{IDS_KEY} to {list(manifest.layer_ids)} and "
                f"eagle_config.{CONVENTION_KEY} to {LAYER_ID_CONVENTION!r}, or correct the manifest"
            )
    return DeclaredLayerIds(manifest.layer_ids, mwhere)


def supported_families() -> str:
    """``family (Arch, Arch), ...`` for every family with an entry, for refusals."""
    return "; ".join(f"{f.name} ({', '.join(f.architectures)})" for f in all_families())


def _family(arch: str) -> Family:
    family = family_of(arch)
    if family is None:
        raise WiringError(f"target architecture {arch} (--model-path) has no family entry in sglang-eagle3-capture; "
                          f"manifest-exact capture covers the families {supported_families()}. Fix: serve the draft "
                          "on one of those targets, or remove its manifest/marked ids to run stock SGLang wiring "
                          "knowingly")
    return family


@dataclass(frozen=True)
class Resolution:
    """What this process's target resolution decided, recorded once (:func:`recorded`).

    ``declared`` is None under stock wiring; ``manifest`` is the draft's manifest as read then (None when
    it has none or is not a local directory).
    """

    draft_path: str
    draft_dir: Path | None
    manifest: Manifest | None
    declared: DeclaredLayerIds | None
    architecture: str
    num_hidden_layers: int


_RECORD: list[Resolution] = []  # at most one: the target ModelRunner of this process


def recorded() -> Resolution | None:
    """The resolution of this process's target, or None when none ran through the capture patch."""
    return _RECORD[-1] if _RECORD else None


def _record(resolution: Resolution) -> None:
    _RECORD[:] = [resolution]


def _refuse(setting: str, problem: str, fix: str) -> WiringError:
    return WiringError(f"sglang-eagle3-capture refuses {setting}: {problem}. Fix: {fix}")


def resolve_target_capture(*, config: Any, server_args: Any, model_config: Any, spec_algorithm: Any,
                           is_draft_worker: bool, draft_path: str | None, draft_hf_config: Callable[[], Any],
                           release: Release | None = None) -> DeclaredLayerIds | None:
    """Which layer ids the target must capture (None: stock wiring), refusing what cannot be wired, and record it.

    Called by the patched resolution seam after SGLang's own resolution filled ``config`` (a
    ``SpecAuxHiddenStateConfig``) for the ``ModelRunner`` whose ``server_args``, ``model_config``,
    ``spec_algorithm`` and ``is_draft_worker`` are passed; ``draft_hf_config()`` returns the draft's HF
    config (None: SGLang resolved no draft), asked only for a speculative target with a draft path; ``release``:
    whose capture loops serve it (default: the installed supported release).
    """
    if is_draft_worker or not draft_path or not (spec_algorithm.is_eagle() or spec_algorithm.is_standalone()):
        return None
    draft_hf = draft_hf_config()
    if draft_hf is None:
        return None
    draft_dir = Path(draft_path) if Path(draft_path).is_dir() else None
    algo = getattr(spec_algorithm, "name", str(spec_algorithm))
    if not spec_algorithm.is_eagle3():
        if is_eagle3_draft(draft_hf, draft_dir):
            raise _refuse(f"--speculative-algorithm {algo} with the EAGLE-3 draft {draft_path}",
                          "SGLang then captures no aux hidden states and skips the draft's fc (its width check), so "
                          "the draft never sees the target's layers and accept length falls to about 1.0",
                          "--speculative-algorithm EAGLE3")
        return None
    target_hf = model_config.hf_config
    manifest = find_manifest(draft_dir) if draft_dir is not None else None
    ec = _eagle_config(draft_hf)
    declared_anyway = manifest is not None or (ec is not None and CONVENTION_KEY in ec)
    try:
        arch = architecture(target_hf, "target config (--model-path)")  # dimensions only once a family serves it
    except ManifestError:
        if declared_anyway:
            raise WiringError(f"target config (--model-path): field 'architectures' is "
                              f"{brief(cfg_get(target_hf, 'architectures'))}, not a list naming the target class, so "
                              f"no family can wire the layer ids the draft {draft_path} declares; fix: serve a target "
                              "whose config.json lists its class in 'architectures'") from None
        return None  # nothing declared: stock wiring, as for any target outside the families
    family = family_of(arch)
    if family is None:
        if declared_anyway:
            raise _refuse(f"the target architecture {arch} (--model-path) for the draft {draft_path}",
                          f"manifest-exact capture is implemented for the families {supported_families()} only",
                          "serve the draft on one of those targets, or remove its manifest/marked ids to run stock "
                          "SGLang wiring knowingly")
        return None
    _, n_layers, _ = target_dims(target_hf, "target config (--model-path)")
    if not config.eagle_use_aux_hidden_state:
        if declared_anyway:
            raise _refuse(f"eagle_config.use_aux_hidden_state=false in {draft_path}/config.json",
                          "the draft declares layer ids but SGLang would capture nothing", "remove "
                          "use_aux_hidden_state or set it to true")
        return None
    if getattr(server_args, "enable_two_batch_overlap", False):
        raise _refuse(f"--enable-two-batch-overlap with EAGLE-3 on {arch}",
                      f"{'/'.join(family.model_classes)}.forward runs its layers (DeepSeek and GLM: those from "
                      "first_k_dense_replace on) through model_forward_stages under two-batch overlap, which skips the "
                      "aux-hidden-state capture", "drop --enable-two-batch-overlap")
    if draft_dir is None:
        logger.warning("eagle3-capture: cannot look for %s: the draft path %s is not a local directory; only marked "
                       "eagle_config ids are honoured. Fix: download the draft and pass its local directory",
                       MANIFEST_FILENAME, draft_path)
    declared = declared_layer_ids(draft_dir, draft_hf, target_hf, manifest=manifest)
    _record(Resolution(draft_path, draft_dir, manifest, declared, arch, n_layers))
    if declared is None:
        stock = stock_sglang_capture({"eagle_config": dict(ec)} if ec is not None else {}, n_layers, family=family,
                                     release=release or releases.installed_or_newest())
        logger.warning("eagle3-capture: draft %s has no %s and no eagle_config.%s; running stock wiring: %s. A draft "
                       "trained on other hidden states loses its acceptance silently. Fix: `%s`", draft_path,
                       MANIFEST_FILENAME, CONVENTION_KEY, stock.describe(), WRITE_HINT)
        return None
    try:
        plan = plan_capture(declared.layer_ids, n_layers, where=declared.where)
    except LayerIdError as e:
        raise WiringError(f"{e}; fix: correct the ids to the layers the draft was trained on (`{WRITE_HINT}`), or "
                          "serve the target it was trained against") from e
    release = release or releases.installed_or_newest()
    if EMBEDDING_LAYER_ID in declared.layer_ids and family.name in release.embedding_crashes:
        raise _refuse(f"layer id -1 (the embedding output, {declared.where}) on {arch}",
                      f"the {family.name} family's capture loop in SGLang {release.version} computes hidden_states + "
                      "residual with no residual at loop index 0 (TypeError at the first forward), so it cannot "
                      "capture the embedding",
                      "upgrade SGLang to a release whose loop reaches it (the newest supported is "
                      f"{releases.newest().version}), or serve a draft trained without layer id -1")
    pp_size = int(getattr(server_args, "pp_size", 1) or 1)
    if pp_size > 1:
        from sglang.srt.distributed.utils import get_pp_indices

        start, end = get_pp_indices(n_layers, pp_size - 1, pp_size)
        try:
            check_stage(plan, start, end, pp_size=pp_size)
        except LayerIdError as e:
            raise WiringError(str(e)) from e
    return DeclaredLayerIds(declared.layer_ids, declared.where, plan, family.name)
