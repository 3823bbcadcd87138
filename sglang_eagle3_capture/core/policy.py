"""The refusal policy from plain data (no torch, no SGLang): the server and ``inspect`` both call :func:`decide`, so
the doctor cannot disagree with the server (docs/how-it-works.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import releases
from .config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION, is_fail_closed, is_vllm_fail_closed
from .errors import DeploymentError, Eagle3CaptureError, UnsupportedSGLangVersion, brief
from .families import Family, all_families, family_of
from .layer_ids import (
    EMBEDDING_LAYER_ID,
    FINAL_NORM,
    check_layer_ids,
    hidden_state_indices,
    is_layer_id,
    layer_id_of_index,
    split_capture,
)
from .manifest import WRITE_HINT, Manifest, check_target
from .releases.schema import Release
from .stock import engine_capture, stock_sglang_capture, vllm_fail_closed_ids

TARGET = "target config (--model-path)"


@dataclass(frozen=True)
class Deployment:
    """The facts a decision depends on."""

    release: Release
    draft: str
    manifest: Manifest | None = None
    eagle_config: Mapping | None = None
    config_file: str | None = None  # the draft's config.json (None: DRAFT/config.json), which errors name
    architecture: str | None = None  # None: the config's ``architectures`` (held next) names no class
    architectures: Any = None
    num_hidden_layers: int = 0
    target_config: Any = None  # the target's HF config, to hold a manifest to (None: not checked)
    eagle3: bool = True  # --speculative-algorithm EAGLE3
    algorithm: str = "EAGLE3"
    eagle3_draft: bool = True  # an EAGLE-3 draft (architecture, manifest or marked ids)
    use_aux_hidden_state: bool = True
    two_batch_overlap: bool = False
    pp_size: int = 1
    last_stage: tuple[int, int] | None = None  # the last pipeline stage's [start, end) layers
    unpatched: Mapping[str, str] = field(default_factory=dict)  # family name -> why its capture patch is inactive
    model_impl: Any = "auto"  # --model-impl ("mindspore": no torch decoder stack, see decide)

    def __post_init__(self) -> None:
        if self.config_file is None:
            object.__setattr__(self, "config_file", str(Path(self.draft) / "config.json"))

    @property
    def declares(self) -> bool:
        """A manifest, eagle_config ids marked with the convention, or the fail-closed object."""
        return self.manifest is not None or _marks(self.eagle_config)


@dataclass(frozen=True)
class Decision:
    """``layer_ids`` (fc order) from ``file``/``field`` to wire on ``family``; None: stock wiring, as ``stock`` says."""

    family: Family | None = None
    layer_ids: tuple[int, ...] | None = None
    file: str | None = None
    field: str | None = None
    stock: str | None = None


def _marks(ec: Any) -> bool:
    return isinstance(ec, Mapping) and (CONVENTION_KEY in ec or is_fail_closed(ec.get(IDS_KEY)))


def _no_family(arch: str) -> str:
    families = "; ".join(f"{f.name} ({', '.join(f.architectures)})" for f in all_families())
    return f"{arch} has no family entry; manifest-exact capture covers the families {families}"


def decide(d: Deployment) -> Decision:
    """What the plugin does with ``d``: the rules in the order the server meets them."""
    if not d.release.supported:
        why = f": {d.release.refused_because}" if d.release.refused_because else ""
        raise UnsupportedSGLangVersion(None, None, f"SGLang {d.release.version} is a release sglang-eagle3-capture "
                                       f"does not support{why}", f"serve with one of "
                                       f"{', '.join(releases.supported_versions())}")
    if not d.eagle3:
        if d.eagle3_draft:
            raise DeploymentError(None, "--speculative-algorithm", f"{d.algorithm} with the EAGLE-3 draft {d.draft}: "
                                  "SGLang then skips the draft's fc, so accept length falls to about 1.0",
                                  "pass --speculative-algorithm EAGLE3")
        return Decision()
    if d.model_impl == "mindspore" and d.declares:
        raise DeploymentError(None, "--model-impl", f"mindspore: SGLang then builds MindSporeForCausalLM, a MindSpore "
                              f"network, whatever the target's architecture ({d.architecture}) (models/mindspore.py:"
                              "193, 359-360; model_loader/utils.py:228-229): no torch decoder stack captures the layer "
                              f"ids the draft {d.draft} declares", "serve with --model-impl sglang (or auto), or "
                              "remove the draft's manifest/marked ids to run stock wiring knowingly")
    if d.architecture is None and d.declares:
        raise DeploymentError(TARGET, "architectures", f"{brief(d.architectures)}, not a list naming the target class "
                              "to wire the draft's layer ids on", "list the target's class there")
    family = None if d.architecture is None else family_of(d.architecture)
    if family is None:
        if d.declares:
            raise DeploymentError(TARGET, "architectures", _no_family(d.architecture), "serve the draft on one of "
                                  "those targets, or remove its manifest/marked ids to run stock wiring knowingly")
        return Decision()
    if not d.use_aux_hidden_state:
        if d.declares:
            raise DeploymentError(d.config_file, "eagle_config.use_aux_hidden_state", "false, but the draft declares "
                                  "layer ids and SGLang would capture nothing", "remove it or set it to true")
        return Decision()
    if d.two_batch_overlap:
        raise DeploymentError(None, "--enable-two-batch-overlap", f"{'/'.join(family.model_classes)}.forward runs its "
                              "layers through model_forward_stages under two-batch overlap, which skips the "
                              f"aux-hidden-state capture on {d.architecture}", "drop --enable-two-batch-overlap")
    declared = declared_ids(d, family)
    if declared is None:
        stock = stock_sglang_capture({"eagle_config": dict(d.eagle_config or {})}, d.num_hidden_layers, family=family,
                                     release=d.release, file=d.config_file)
        return Decision(family, stock=stock.describe())
    ids, file, fld = declared
    _check_ids(ids, d.num_hidden_layers, file, fld)
    if family.name in d.unpatched:
        raise DeploymentError(file, fld, f"the draft declares layer ids {list(ids)} but the sglang-eagle3-capture "
                              f"capture patch is incomplete for the {family.name} family in this process "
                              f"({d.unpatched[family.name]})", "reinstall sglang-eagle3-capture, check the log for "
                              "'eagle3-capture' errors, or serve with a supported SGLang release")
    upgrade = f"upgrade SGLang (the newest supported is {releases.newest().version})"
    if d.architecture in d.release.absent_hooks:
        raise DeploymentError(file, fld, f"the draft declares layer ids {list(ids)} on {d.architecture}, which has "
                              f"no set_eagle3_layers_to_capture in SGLang {d.release.version} (a later release added "
                              "it)", upgrade)
    if EMBEDDING_LAYER_ID in ids and family.name in d.release.embedding_crashes:
        raise DeploymentError(file, fld, f"layer id -1 (the embedding output) on {d.architecture}: the {family.name} "
                              f"family's capture loop in SGLang {d.release.version} computes hidden_states + residual "
                              "with no residual at loop index 0 (TypeError at the first forward)",
                              f"{upgrade}, or serve a draft trained without layer id -1")
    if d.last_stage is not None:
        check_stage(ids, d.num_hidden_layers, *d.last_stage, pp_size=d.pp_size, file=file, field=fld)
    return Decision(family, ids, file, fld)


def declared_ids(d: Deployment, family: Family) -> tuple[tuple[int, ...], str, str] | None:
    """``(layer ids, file, field)`` the draft declares (its manifest, else marked eagle_config ids), or None."""
    ec, cfg_field = d.eagle_config, f"eagle_config.{IDS_KEY}"
    marked = None
    if ec is not None and CONVENTION_KEY in ec:
        if ec[CONVENTION_KEY] != LAYER_ID_CONVENTION:
            raise DeploymentError(d.config_file, f"eagle_config.{CONVENTION_KEY}", f"is {brief(ec[CONVENTION_KEY])}",
                                  f"set it to {LAYER_ID_CONVENTION!r} (-1: embedding, k: layer k's output), "
                                  "or remove it")
        marked = ec.get(IDS_KEY)
        if not isinstance(marked, list) or not all(is_layer_id(i) for i in marked):
            raise DeploymentError(d.config_file, cfg_field, f"expected a list of integer ids, got {brief(marked)}",
                                  "list the layers the fc consumes, in fc order, e.g. [-1, 2, 30]")
        marked = tuple(marked)
    m = d.manifest
    fail_closed = ec is not None and is_fail_closed(ec.get(IDS_KEY))
    if m is None:
        if fail_closed:
            raise DeploymentError(d.config_file, cfg_field, f"is sglang-eagle3-capture's fail-closed object, standing "
                                  f"for the ids of an eagle3_manifest.json, but the draft {d.draft} has none (or it "
                                  "is not a local directory)",
                                  f"restore eagle3_manifest.json beside config.json, or `{WRITE_HINT}`")
        return None if marked is None else (marked, d.config_file, cfg_field)
    if d.target_config is not None:
        check_target(m, d.target_config, where=TARGET)
    mfile = str(m.path)
    if marked is not None and marked != m.layer_ids:
        raise DeploymentError(mfile, "layer_ids", f"is {list(m.layer_ids)} but {d.config_file} field '{cfg_field}' "
                              f"is {list(marked)} (marked as layer ids)", "make them equal (the manifest is what the "
                              "fc was trained on), or remove the ids from eagle_config")
    if marked is None and ec is not None and IDS_KEY in ec and not fail_closed:
        stock = stock_sglang_capture({"eagle_config": dict(ec)}, d.num_hidden_layers, family=family, release=d.release,
                                     file=d.config_file)
        want = sorted(hidden_state_indices(i for i in m.layer_ids if i != FINAL_NORM))
        # no stock reading captures the final norm's output: an id list beside such a manifest always means other
        if stock.problem or sorted(stock.loop_indices) != want or FINAL_NORM in m.layer_ids:
            raise DeploymentError(mfile, "layer_ids", f"is {list(m.layer_ids)} (loop indices {want}), but "
                                  f"{d.config_file} field '{cfg_field}' means something else to SGLang: "
                                  f"{stock.describe()}", f"set eagle_config.{IDS_KEY} to {list(m.layer_ids)} and "
                                  f"eagle_config.{CONVENTION_KEY} to {LAYER_ID_CONVENTION!r}, or correct the manifest")
    return m.layer_ids, mfile, "layer_ids"


def _check_ids(ids: tuple[int, ...], num_hidden_layers: int, file: str, fld: str) -> None:
    try:
        check_layer_ids(list(ids), num_hidden_layers, file=file, field=fld)
    except Eagle3CaptureError as e:
        raise DeploymentError(file, fld, e.problem, f"correct the ids (`{WRITE_HINT}`), or serve the target the draft "
                              "was trained against") from None


def check_stage(layer_ids: tuple[int, ...], num_hidden_layers: int, start_layer: int, end_layer: int, *,
                pp_size: int, file: str | None, field: str | None) -> None:
    """Raise unless every id captured in SGLang's loop runs on the last pipeline stage, the only one that captures."""
    loop = split_capture(layer_ids, num_hidden_layers)[0]
    missing = [layer_id_of_index(i) for i in loop if not start_layer <= i < end_layer]
    if missing:
        raise DeploymentError(file, field, f"layer ids {missing} are captured at the input of decoder layers outside "
                              f"[{start_layer}, {end_layer}), the last pipeline stage (--pp-size {pp_size}), the only "
                              "one that captures", "serve with --pp-size 1, or set SGLANG_PP_LAYER_PARTITION so the "
                              f"last stage starts at or before decoder layer {min(loop)}")


@dataclass(frozen=True)
class VllmDeployment:
    """The facts the vLLM plugin's decision depends on."""

    release: Any  # None: not in the vLLM release table
    version: str
    draft: str
    manifest: Manifest | None
    draft_config: Mapping
    config_file: str = "draft config.json"
    target_config: Any = None
    unserved: str | None = None  # why the plugin's capture patch is not active in this process

    @property
    def declares(self) -> bool:
        """A manifest, or a value only the plugin reads (either fail-closed value, or marked eagle_config ids)."""
        return (self.manifest is not None or _marks(self.draft_config.get("eagle_config"))
                or is_vllm_fail_closed(self.draft_config.get(IDS_KEY)))


def decide_vllm(d: VllmDeployment) -> Decision:
    """Stock wiring for a draft that declares nothing; else the manifest's ids, or a :class:`DeploymentError`."""
    if not d.declares:
        return Decision()
    m = d.manifest
    where, fld = (str(m.path), "layer_ids") if m is not None else (d.config_file, IDS_KEY)
    supported = ", ".join(r.version for r in releases.vllm_supported())
    if d.release is None or not d.release.supported or d.unserved:
        why = d.unserved or (f"vLLM {d.version} is not in the vLLM release table" if d.release is None else
                             f"vLLM {d.version} is not served: {d.release.refused_because}")
        raise DeploymentError(where, fld, f"the draft {d.draft} declares layer ids the sglang-eagle3-capture vLLM "
                              f"plugin does not wire in this process ({why})", f"serve with vLLM {supported} and its "
                              "V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0 on 0.33), or remove the draft's "
                              "eagle3_manifest.json to run stock vLLM wiring knowingly")
    if m is None:
        raise DeploymentError(d.config_file, fld, f"stands for the ids of an eagle3_manifest.json, but the draft "
                              f"{d.draft} has none (or it is not a local directory)", "restore eagle3_manifest.json "
                              f"beside config.json, or `{WRITE_HINT} --fail-closed`")
    if d.target_config is not None:
        check_target(m, d.target_config, where=TARGET)
    family = family_of(m.target_architecture)
    if family is None:
        raise DeploymentError(str(m.path), "target.architecture", _no_family(m.target_architecture),
                              "serve the draft on one of those targets")
    n = m.target_num_hidden_layers
    _check_ids(m.layer_ids, n, str(m.path), "layer_ids")
    safe = vllm_fail_closed_ids(m.layer_ids, n, family=family).value
    if d.draft_config.get(IDS_KEY) != safe:
        for reader in d.release.readers:
            stock = engine_capture(dict(d.draft_config), n, family=family, reader=reader)
            if not stock.refuses_at_startup and (stock.fed_layer_ids != m.layer_ids or stock.problem):
                raise DeploymentError(str(m.path), "layer_ids", f"is {list(m.layer_ids)}, but {d.config_file} means "
                                      f"something else to stock vLLM ({reader.name}: {stock.describe()})",
                                      f"run `sglang-eagle3-capture manifest write {d.draft} --layer-ids="
                                      f"{','.join(map(str, m.layer_ids))} --target TARGET --force --fail-closed` "
                                      f"(top-level {IDS_KEY} {json.dumps(safe)})")
    return Decision(family, m.layer_ids, str(m.path), "layer_ids")
