"""A launch as the plugin reads and checks it, in one place for the server (:mod:`.sglang.resolution`) and the
preflight (``doctor/setup_args.py``, ``doctor/inspect.py``), so the preflight cannot approve what the server refuses
(tests/inprocess/test_preflight_agrees.py). No torch, no SGLang import: the callers pass SGLang's objects.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from . import policy
from .config_keys import CONVENTION_KEY
from .draft_checks import DraftPlan, plan_draft
from .errors import DeploymentError, InputError
from .families import family_of
from .layer_ids import is_int
from .manifest import Manifest
from .releases.schema import Release
from .target_config import architecture, cfg_get, target_dims

# The algorithms SGLang serves with its EAGLE worker (spec_algorithm.is_eagle() or is_standalone()): the resolution
# seam's business, and what the draft-chain checks apply to.
EAGLE_WORKER_ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE")


def effective_value(server_args: Any, release: Release, name: str) -> Any:
    """``name`` as SGLang runs it: its last declaration in SGLang's resolution record where the release keeps one
    (declarations leave the raw input in place), else the field itself (assigned in place)."""
    if release.resolution_record:
        for _, declared in reversed(getattr(server_args, "_resolved_overrides", None) or ()):
            if name in declared:
                return declared[name]
    return getattr(server_args, name, None)


@dataclass(frozen=True)
class Launch:
    """The settings of a resolved launch the plugin acts on, as SGLang runs them (:func:`read_launch`)."""

    algorithm: str  # upper case; "NONE" without speculation
    num_steps: Any = None
    eagle_topk: Any = None
    num_draft_tokens: Any = None
    draft_window: Any = None
    model_path: str | None = None
    two_batch_overlap: bool = False
    pp_size: int = 1
    model_impl: Any = "auto"

    @property
    def eagle3(self) -> bool:
        """``--speculative-algorithm EAGLE3``."""
        return self.algorithm == "EAGLE3"

    @property
    def eagle_worker(self) -> bool:
        """SGLang serves it with its EAGLE worker: the plugin's resolution seam decides (else it is not involved)."""
        return self.algorithm in EAGLE_WORKER_ALGORITHMS


def read_launch(server_args: Any, release: Release, *, algorithm: Any = None) -> Launch:
    """The :class:`Launch` of a resolved ``ServerArgs`` (the server's, or the one ``inspect`` resolved);
    ``algorithm``: the speculative algorithm SGLang's runner holds, where the caller has one (else the field's)."""
    value = functools.partial(effective_value, server_args, release)
    algorithm = value("speculative_algorithm") if algorithm is None else algorithm
    algorithm = str(getattr(algorithm, "name", algorithm) or "NONE").upper()  # an enum in some releases
    model_path = value("model_path")
    return Launch(algorithm=algorithm, num_steps=value("speculative_num_steps"),
                  eagle_topk=value("speculative_eagle_topk"), num_draft_tokens=value("speculative_num_draft_tokens"),
                  draft_window=value("speculative_draft_window_size"),
                  model_path=None if model_path is None else str(model_path),
                  two_batch_overlap=bool(value("enable_two_batch_overlap")), pp_size=int(value("pp_size") or 1),
                  model_impl=value("model_impl") or "auto")


def check_launch(launch: Launch) -> None:
    """Refuse a draft chain SGLang accepts but its EAGLE worker cannot run: a value below 1, or more draft tokens than
    the tree has candidates (speculative/eagle_utils.py ``organize_draft_results`` takes the top
    ``num_draft_tokens - 1`` of ``topk + (steps - 1) * topk**2`` scores with ``torch.topk``)."""
    if not launch.eagle_worker:
        return
    steps, topk, tokens = (v if is_int(v) else None for v in (launch.num_steps, launch.eagle_topk,
                                                              launch.num_draft_tokens))
    for flag, value in (("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk),
                        ("--speculative-num-draft-tokens", tokens)):
        if value is not None and value < 1:
            raise DeploymentError(None, flag, f"is {value}, which SGLang accepts but its {launch.algorithm} worker "
                                  "cannot run (it drafts from at least one step, one candidate and one token)",
                                  f"pass {flag} 1 or more")
    if steps is not None and topk is not None and tokens is not None:
        candidates = topk + (steps - 1) * topk * topk
        if tokens - 1 > candidates:
            raise DeploymentError(None, "--speculative-num-draft-tokens", f"is {tokens}, but {steps} steps of topk "
                                  f"{topk} propose {candidates} candidates, and SGLang picks num_draft_tokens - 1 = "
                                  f"{tokens - 1} of them (speculative/eagle_utils.py organize_draft_results: "
                                  "torch.topk fails at the first draft)",
                                  f"pass --speculative-num-draft-tokens {candidates + 1} or fewer, or more steps or "
                                  "a larger --speculative-eagle-topk")


def target_facts(target_config: Any) -> tuple[str | None, int]:
    """``(architecture, num_hidden_layers)`` of the target's HF config as the policy takes them: None when
    ``architectures`` names no class, 0 layers for a target without a family entry."""
    try:
        arch = architecture(target_config, policy.TARGET)
    except InputError:
        return None, 0
    return arch, (target_dims(target_config, policy.TARGET)[1] if family_of(arch) else 0)


def is_eagle3_draft(draft_config: Any, manifest: Manifest | None) -> bool:
    """An EAGLE-3 draft: its class says so (SGLang's or speculators'), or it declares layer ids."""
    archs = cfg_get(draft_config, "architectures") or []
    ec = cfg_get(draft_config, "eagle_config")
    return (any("Eagle3" in str(a) for a in archs) or cfg_get(draft_config, "speculators_model_type") == "eagle3"
            or manifest is not None or (isinstance(ec, Mapping) and CONVENTION_KEY in ec))


def eagle_config_of(draft_config: Any) -> Mapping | None:
    """The draft config's ``eagle_config`` as a mapping (an HF config may hold it as an object)."""
    ec = cfg_get(draft_config, "eagle_config")
    if ec is None or isinstance(ec, Mapping):
        return ec
    return {k: v for k, v in vars(ec).items() if not k.startswith("_")}


def deployment(launch: Launch | None, *, release: Release, draft_path: str, manifest: Manifest | None,
               draft_config: Any, target_config: Any = None, architecture: str | None = None,
               num_hidden_layers: int = 0, use_aux_hidden_state: bool | None = None,
               pp_indices: Callable[[int, int, int], Any] | None = None, unpatched: Mapping[str, str] | None = None
               ) -> policy.Deployment:
    """The :class:`~.policy.Deployment` of a draft served by ``launch`` (None: EAGLE3), the target read from
    ``target_config`` or else given as ``architecture`` and ``num_hidden_layers``. ``use_aux_hidden_state=None``
    resolves it as spec_aux_hidden_state.py ``_resolve_eagle_aux_hidden_state`` does; ``pp_indices`` is SGLang's
    ``get_pp_indices``, for the last pipeline stage's layers."""
    launch = launch or Launch("EAGLE3")
    ec = eagle_config_of(draft_config)
    if target_config is not None:
        architecture, num_hidden_layers = target_facts(target_config)
    last_stage = None
    if launch.pp_size > 1 and num_hidden_layers and pp_indices is not None:
        last_stage = tuple(pp_indices(num_hidden_layers, launch.pp_size - 1, launch.pp_size))
    if use_aux_hidden_state is None:
        use_aux_hidden_state = launch.eagle3 and (ec.get("use_aux_hidden_state", True) if ec is not None else True)
    return policy.Deployment(
        release=release, draft=draft_path, manifest=manifest, eagle_config=ec, architecture=architecture,
        architectures=cfg_get(target_config, "architectures") if target_config is not None else architecture,
        num_hidden_layers=num_hidden_layers, target_config=target_config, eagle3=launch.eagle3,
        algorithm=launch.algorithm, eagle3_draft=is_eagle3_draft(draft_config, manifest),
        use_aux_hidden_state=bool(use_aux_hidden_state), two_batch_overlap=launch.two_batch_overlap,
        pp_size=launch.pp_size, last_stage=last_stage, unpatched=unpatched or {}, model_impl=launch.model_impl)


def draft_class(draft_config: Any, release: Release) -> str | None:
    """``"llama"`` or ``"mla"``: the plugin's draft loader that SGLang ``release`` builds for the draft config's
    ``architectures[0]`` (the class names of its ``draft.*`` seams), or None when the plugin loads no such class."""
    archs = cfg_get(draft_config, "architectures") or []
    arch = archs[0] if isinstance(archs, (list, tuple)) and archs else None
    for kind in ("llama", "mla"):
        if any(s.owner == arch for s in release.seams_with(f"draft.{kind}.")):
            return kind
    return None


def check_draft(draft_config: Any, draft_path: str, manifest: Manifest | None, *, mla: bool,
                server_window: Any = None, read_weights: bool = True) -> DraftPlan:
    """The draft loader's startup checks (:func:`.draft_checks.plan_draft`), called by the patched draft class and by
    ``inspect`` (``read_weights`` False for a directory that holds only the config)."""
    local = Path(draft_path) if draft_path and Path(draft_path).is_dir() else None
    return plan_draft(draft_config, local, manifest, mla=mla, server_window=server_window, draft_path=draft_path,
                      read_weights=read_weights)
