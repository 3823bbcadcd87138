"""Reading SGLang's runtime state from inside its processes: the TP rank, the draft path, the draft window.

Where each lives is a release fact (:attr:`~sglang_eagle3_capture.releases.schema.Release.draft_path_from`):
SGLang's ``runtime_context.get_spec()`` / ``get_parallel()`` publish them once the scheduler process is set
up; older releases keep the draft path on ``server_args``.
"""

from __future__ import annotations

from typing import Any

from .. import releases


def current_tp_rank() -> int | None:
    """This process's TP rank from SGLang's runtime context, or None before SGLang publishes it."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return get_parallel().tp_rank
    except (ImportError, AttributeError, ValueError, RuntimeError):
        return None


def _spec() -> Any:
    from sglang.srt.runtime_context import get_spec

    return get_spec()


def draft_model_path(server_args: Any = None) -> str | None:
    """``--speculative-draft-model-path`` as this release publishes it."""
    if releases.check_sglang_version().draft_path_from == "server_args":
        return getattr(server_args, "speculative_draft_model_path", None)
    return _spec().speculative_draft_model_path


def draft_window_size() -> int | None:
    """``--speculative-draft-window-size`` (None when unset)."""
    return getattr(_spec(), "speculative_draft_window_size", None)
