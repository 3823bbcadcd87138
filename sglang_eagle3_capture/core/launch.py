"""A launch as the plugin reads and checks it, one place for the server and the preflight, so the preflight cannot
approve what the server refuses (docs/setup-report.md). No torch, no SGLang import: the callers pass SGLang's objects.
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
from .target_config import architecture as target_architecture
from .target_config import cfg_get, target_dims


def effective_value(server_args: Any, release: Release, name: str) -> Any:
    """``name`` as SGLang runs it: its last declaration in the release's resolution record, else the field itself."""
    if release.resolution_record:
        for _, declared in reversed(getattr(server_args, "_resolved_overrides", None) or ()):
            if name in declared:
                return declared[name]
    return getattr(server_args, name, None)


@dataclass(frozen=True)
class Launch:
    """The settings of a resolved launch the plugin acts on, as SGLang runs them."""

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
        return self.algorithm == "EAGLE3"

    @property
    def eagle_worker(self) -> bool:
        """SGLang serves it with its EAGLE worker (spec_algorithm.is_eagle() or is_standalone()): the plugin decides."""
        return self.algorithm in ("EAGLE", "EAGLE3", "STANDALONE")


def read_launch(server_args: Any, release: Release, *, algorithm: Any = None) -> Launch:
    """The :class:`Launch` of a resolved ``ServerArgs``; ``algorithm``: the one SGLang's runner holds, if known."""
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
    """Refuse a draft chain SGLang accepts but its EAGLE worker cannot run (a value below 1, too few candidates)."""
    if not launch.eagle_worker:
        return
    steps, topk, tokens = (v if is_int(v) else None for v in (launch.num_steps, launch.eagle_topk,
                                                              launch.num_draft_tokens))
    for flag, value in (("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk),
                        ("--speculative-num-draft-tokens", tokens)):
        if value is not None and value < 1:
            raise DeploymentError(None, flag, f"is {value}, which SGLang accepts but its {launch.algorithm} worker "
                                  "cannot run (it needs one step, candidate and token)", f"pass {flag} 1 or more")
    if steps is not None and topk is not None and tokens is not None:
        candidates = topk + (steps - 1) * topk * topk
        if tokens - 1 > candidates:
            raise DeploymentError(None, "--speculative-num-draft-tokens", f"is {tokens}, but {steps} steps of topk "
                                  f"{topk} propose {candidates} candidates, and SGLang picks num_draft_tokens - 1 = "
                                  f"{tokens - 1} of them (eagle_utils.py organize_draft_results: torch.topk fails)",
                                  f"pass --speculative-num-draft-tokens {candidates + 1} or fewer, or more steps or "
                                  "a larger --speculative-eagle-topk")


def deployment(launch: Launch | None, *, release: Release, draft_path: str, manifest: Manifest | None,
               draft_config: Any, target_config: Any = None, architecture: str | None = None,
               num_hidden_layers: int = 0, use_aux_hidden_state: bool | None = None,
               pp_indices: Callable[[int, int, int], Any] | None = None, unpatched: Mapping[str, str] | None = None
               ) -> policy.Deployment:
    """The :class:`~.policy.Deployment` of a draft served by ``launch`` (None: EAGLE3), the target read from
    ``target_config`` or else given; ``pp_indices`` is SGLang's ``get_pp_indices``."""
    launch = launch or Launch("EAGLE3")
    raw_ec = cfg_get(draft_config, "eagle_config")  # an HF config may hold it as an object
    ec = raw_ec if raw_ec is None or isinstance(raw_ec, Mapping) else {
        k: v for k, v in vars(raw_ec).items() if not k.startswith("_")}
    if target_config is not None:  # no class named: None; no family entry: 0 layers
        try:
            architecture = target_architecture(target_config, policy.TARGET)
        except InputError:
            architecture = None
        has_family = architecture is not None and family_of(architecture)
        num_hidden_layers = target_dims(target_config, policy.TARGET)[1] if has_family else 0
    last_stage = None
    if launch.pp_size > 1 and num_hidden_layers and pp_indices is not None:
        last_stage = tuple(pp_indices(num_hidden_layers, launch.pp_size - 1, launch.pp_size))
    if use_aux_hidden_state is None:
        use_aux_hidden_state = launch.eagle3 and (ec.get("use_aux_hidden_state", True) if ec is not None else True)
    # an EAGLE-3 draft: its class says so (SGLang's or speculators'), or it declares layer ids
    eagle3_draft = (any("Eagle3" in str(a) for a in cfg_get(draft_config, "architectures") or [])
                    or cfg_get(draft_config, "speculators_model_type") == "eagle3" or manifest is not None
                    or (isinstance(raw_ec, Mapping) and CONVENTION_KEY in raw_ec))
    return policy.Deployment(
        release=release, draft=draft_path, manifest=manifest, eagle_config=ec, architecture=architecture,
        architectures=cfg_get(target_config, "architectures") if target_config is not None else architecture,
        num_hidden_layers=num_hidden_layers, target_config=target_config, eagle3=launch.eagle3,
        algorithm=launch.algorithm, eagle3_draft=eagle3_draft,
        use_aux_hidden_state=bool(use_aux_hidden_state), two_batch_overlap=launch.two_batch_overlap,
        pp_size=launch.pp_size, last_stage=last_stage, unpatched=unpatched or {}, model_impl=launch.model_impl)


def draft_class(draft_config: Any, release: Release) -> str | None:
    """``"llama"`` or ``"mla"``: the plugin's draft loader (its ``draft.*`` seams) for ``architectures[0]``, or None."""
    archs = cfg_get(draft_config, "architectures") or []
    arch = archs[0] if isinstance(archs, (list, tuple)) and archs else None
    return next((k for k in ("llama", "mla") if any(s.owner == arch for s in release.seams_with(f"draft.{k}."))), None)


def check_draft(draft_config: Any, draft_path: str, manifest: Manifest | None, *, mla: bool,
                server_window: Any = None, read_weights: bool = True) -> DraftPlan:
    """The draft loader's startup checks, for the patched draft class and ``inspect`` (which may skip the weights)."""
    local = Path(draft_path) if draft_path and Path(draft_path).is_dir() else None
    return plan_draft(draft_config, local, manifest, mla=mla, server_window=server_window, draft_path=draft_path,
                      read_weights=read_weights)
