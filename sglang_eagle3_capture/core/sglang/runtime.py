"""Reading SGLang's runtime state from inside its processes: the TP rank, the draft path and config, the window.

Where each lives is a release fact (``draft_path_from``, ``has_draft_model_config`` in the release table).
"""

from __future__ import annotations

import sys
from typing import Any

from .. import releases


def current_tp_rank() -> int | None:
    """This process's TP rank from SGLang's runtime context, or None before SGLang publishes it (older releases
    raise AssertionError until the TP group exists, later ones ValueError or RuntimeError)."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return get_parallel().tp_rank
    except Exception:  # noqa: BLE001 - see the docstring; a log line must never fail for want of a rank
        return None


def tp_all_gather(obj: Any) -> list:
    """``obj`` of every rank of this process's TP group, in rank order, over SGLang's TP CPU (gloo) group
    (``get_parallel().tp_group.cpu_group``: runtime_context.py, distributed/parallel_state.py); ``[obj]`` at TP 1
    or without a TP group. Every rank must call it."""
    if "sglang.srt.runtime_context" not in sys.modules:
        return [obj]
    from sglang.srt.runtime_context import get_parallel

    try:
        group = get_parallel().tp_group
    except (AssertionError, RuntimeError, ValueError):  # not built in this process (see current_tp_rank)
        return [obj]
    if group is None or group.world_size == 1:
        return [obj]
    import torch.distributed as dist

    out: list = [None] * group.world_size
    dist.all_gather_object(out, obj, group=group.cpu_group)
    return out


def _spec() -> Any:
    from sglang.srt.runtime_context import get_spec

    return get_spec()


def _from_server_args() -> bool:
    return releases.installed_or_newest().draft_path_from == "server_args"


def draft_model_path(server_args: Any = None) -> str | None:
    """``--speculative-draft-model-path`` as this release resolved it."""
    if _from_server_args():
        return getattr(server_args, "speculative_draft_model_path", None)
    return _spec().speculative_draft_model_path


def draft_hf_config(spec_aux_config: Any, server_args: Any, draft_path: str) -> Any:
    """The draft's HF config as SGLang reads it: ``spec_aux_config.draft_model_config`` where the release has
    it (None there means SGLang resolved no draft), else a draft ModelConfig built as the releases with
    ``has_draft_model_config`` build it."""
    if releases.installed_or_newest().has_draft_model_config:
        mc = spec_aux_config.draft_model_config
        return None if mc is None else mc.hf_config
    from sglang.srt.configs.model_config import ModelConfig

    source = server_args if _from_server_args() else _spec()
    mc = ModelConfig.from_server_args(server_args, model_path=draft_path, is_draft_model=True,
                                      model_revision=getattr(source, "speculative_draft_model_revision", None))
    return mc.hf_config


def draft_window_size() -> int | None:
    """``--speculative-draft-window-size`` (None when unset)."""
    return getattr(_spec(), "speculative_draft_window_size", None)
