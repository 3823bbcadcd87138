"""The first-batch self-check in SGLang's target processes: armed where a stack is configured, run on the first real
extend batch through the gate on ``ModelRunner.forward`` (prefill graphs are not replayed while a check is pending).
The check itself is :mod:`..selfcheck` (engine-neutral); docs/self-check.md.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

from .. import seams
from ..logs import get_logger
from ..releases.schema import Release
from ..selfcheck import ENV, Session, enabled
from ..selfcheck import SelfCheck as _Check

logger = get_logger(__name__)

CHECKED_MODES = ("EXTEND", "MIXED")  # ForwardMode names; not TARGET_VERIFY, SPLIT_PREFILL, DRAFT_EXTEND*, IDLE
_PENDING: dict[int, "SelfCheck"] = {}  # id(stack) -> its check (the model holds nothing of ours)
_GATE_PATCH: list[seams.Patch] = []  # the applied gate patch while any check is pending


def pending() -> tuple["SelfCheck", ...]:
    """The checks of this process that have not passed yet."""
    return tuple(_PENDING.values())


def gate_patch(release: Release) -> seams.Patch:
    """The gate: ``ModelRunner.forward`` runs pending checks; prefill graphs are not replayed while one is pending."""
    return seams.Patch("selfcheck", (release.seam("selfcheck.gate"), release.seam("selfcheck.eager_prefill")),
                       lambda seam, original: _WRAPPERS[seam.role](original))


def arm(stack: Any, plan: Any, family: Any, *, num_hidden_layers: int, where: str,
        release: Release | None = None) -> "SelfCheck | None":
    """Arm a check of ``stack`` (just configured with ``plan``) for its first real extend batch and apply the gate;
    None when switched off or on a PD decode server (no extend batch: the prefill server's check covers it)."""
    from .. import releases

    if not enabled():
        logger.warning("eagle3-capture: %s=0: the first-batch self-check is off; the fc wiring is not verified "
                       "in this process (pid %d)", ENV, os.getpid())
        return None
    if _pd_decode():
        return None
    release = release or releases.installed_or_newest()
    check = watch(SelfCheck(stack, plan, family, release.selfcheck_routes, num_hidden_layers=num_hidden_layers,
                            where=where))
    if not _GATE_PATCH:
        _GATE_PATCH.append(gate_patch(release))
        seams.apply(_GATE_PATCH[0])
    return check


def _pd_decode() -> bool:
    try:
        from sglang.srt.runtime_context import get_server_args

        return str(getattr(get_server_args(), "disaggregation_mode", "")) == "decode"
    except Exception:  # noqa: BLE001 - no published server args (in-process use): not a PD decode server
        return False


def watch(check: "SelfCheck") -> "SelfCheck":
    """Make ``check`` pending (:func:`arm` without the gate)."""
    _PENDING[id(check.stack_ref())] = check
    return check


def disarm(stack: Any = None) -> None:
    """Drop the pending check of ``stack`` (every one when None) and revert the gate when none is left."""
    if stack is None:
        _PENDING.clear()
    else:
        _PENDING.pop(id(stack), None)
    if not _PENDING and _GATE_PATCH:
        seams.revert(_GATE_PATCH.pop())


def gate_applied() -> bool:
    """True while the gate holds ``ModelRunner.forward`` and ``can_replay_locally``."""
    return bool(_GATE_PATCH) and seams.is_applied(_GATE_PATCH[0])


def is_real_extend(forward_batch: Any) -> bool:
    """A batch the check runs on: EXTEND or MIXED, with at least one token."""
    mode = getattr(getattr(forward_batch, "forward_mode", None), "name", None)
    if mode not in CHECKED_MODES:
        return False
    ids = getattr(forward_batch, "input_ids", None)
    rows = ids.shape[0] if ids is not None else getattr(getattr(forward_batch, "input_embeds", None), "shape", (0,))[0]
    return rows > 0


def checked(forward_batch: Any, run: Callable[[], Any]) -> Any:
    """``run()`` (one ``ModelRunner.forward``) with every pending check's hooks in place on a real extend batch; a check
    that matched is reported and dropped (the gate with the last)."""
    if not _PENDING or not is_real_extend(forward_batch):
        return run()
    sessions = [Session(c) for c in list(_PENDING.values())]
    try:
        out = run()
    finally:
        for s in sessions:
            s.close()
    for s in sessions:
        if s.passed:
            s.check.report(s)
            disarm(s.check.stack_ref())
    return out


def _wrap_gate(original: Callable) -> Callable:
    @functools.wraps(original)
    def forward(self, forward_batch, *args, **kwargs):
        return checked(forward_batch, lambda: original(self, forward_batch, *args, **kwargs))

    return forward


def _wrap_no_replay(original: Callable) -> Callable:
    @functools.wraps(original)
    def can_replay_locally(self, *args, **kwargs):
        return False if _PENDING else original(self, *args, **kwargs)

    return can_replay_locally


_WRAPPERS: dict[str, Callable[[Callable], Callable]] = {
    "selfcheck.gate": _wrap_gate,
    "selfcheck.eager_prefill": _wrap_no_replay,
}


class SelfCheck(_Check):
    """The check in an SGLang target process: its context (TP rank, SGLang release) and fix, and the attention-TP
    slice a rank sees."""

    def context(self) -> str:
        """``tp_rank R, pid P, sglang V`` for the log lines."""
        from .. import releases
        from .runtime import current_tp_rank

        version = releases.installed_sglang_version()
        note = (f" (newer than the release table: patched as {releases.newest().version}, unverified; this check is "
                "its verification)") if releases.unverified() else ""
        rank = current_tp_rank() if "sglang" in sys.modules else None  # never import SGLang for a log line
        return f"tp_rank {rank}, pid {os.getpid()}, sglang {version}{note}"

    def fix(self) -> str:
        """The fix a failure names (an engine adapter says its own)."""
        from .. import releases

        return (f"install a supported SGLang release ({', '.join(releases.supported_versions())}); this one is "
                "newer than the release table and its capture loop differs" if releases.unverified() else
                "reinstall sglang-eagle3-capture unmodified for this SGLang release and remove anything else that "
                "patches the model's capture (plugins, sitecustomize); if it persists, report it with this message "
                "and the server arguments")

    def attn_tp(self) -> tuple[int, int]:
        return _attn_tp()


def _attn_tp() -> tuple[int, int]:
    if "sglang" not in sys.modules:
        return 0, 1
    try:
        from sglang.srt.runtime_context import get_parallel

        p = get_parallel()
        return int(p.attn_tp_rank), int(p.attn_tp_size)
    except Exception:  # noqa: BLE001 - no runtime context (in-process use, tests): a single rank
        return 0, 1


__all__ = ["ENV", "SelfCheck", "Session", "arm", "checked", "disarm", "enabled", "gate_applied", "gate_patch",
           "is_real_extend", "pending", "watch"]
