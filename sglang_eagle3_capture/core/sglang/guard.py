"""The resolution gate's fallback seat: where the capture patch is not active, a deployment whose draft declares
layer ids fails at startup instead of running stock wiring.

Armed when the installed SGLang is unsupported or the resolution seam could not be patched, so it depends on none
of the patched seams: only on ``ModelRunner.initialize`` (wrapped with ``*args, **kwargs``; it runs in
``ModelRunner.__init__`` before the model loads, in every release the guard can meet: docs/releases.md) and on
``ServerArgs.speculative_algorithm`` / ``speculative_draft_model_path``.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any, Callable

from ..after_import import when_imported
from ..config_keys import CONVENTION_KEY, IDS_KEY, is_fail_closed
from ..errors import Eagle3CaptureError, InputError
from ..logs import get_logger

logger = get_logger(__name__)

MODULE, OWNER, ATTR = "sglang.srt.model_executor.model_runner", "ModelRunner", "initialize"
_ARMED: dict[str, Any] = {}  # "reason" and "error" of the armed guard; "original" once installed


def declares_layer_ids(draft_path: Any) -> str | None:
    """The file by which the draft at ``draft_path`` declares layer ids (its manifest, or a config.json with marked
    ids), or None. Anything standing at the manifest path counts, and an unreadable config.json raises
    :class:`~..errors.InputError`: refusing to start beats serving stock wiring to a draft whose declaration could
    not be read."""
    if not draft_path or not Path(str(draft_path)).is_dir():
        return None
    from ..manifest import MANIFEST_FILENAME  # the readers only where a guard fires, not in every process
    from ..userfiles import path_kind, read_json_object

    d = Path(str(draft_path))
    fix = "make it a readable JSON object, or serve a draft whose files can be read"
    if path_kind(d / MANIFEST_FILENAME, fix=fix) != "missing":
        return str(d / MANIFEST_FILENAME)
    config = d / "config.json"
    if path_kind(config, fix=fix) == "missing":
        return None
    cfg = read_json_object(config, fix=fix)
    ec = cfg.get("eagle_config")
    declared = isinstance(ec, dict) and (CONVENTION_KEY in ec or is_fail_closed(ec.get(IDS_KEY)))
    return str(config) if declared else None


def _is_eagle3(runner: Any, server_args: Any) -> bool:
    algo = getattr(runner, "spec_algorithm", None)
    if algo is not None and hasattr(algo, "is_eagle3"):
        return bool(algo.is_eagle3())
    return str(getattr(server_args, "speculative_algorithm", "") or "").upper() == "EAGLE3"


def check(runner: Any) -> None:
    """Refuse ``runner`` (an SGLang ModelRunner being built) when it would serve a draft that declares layer ids."""
    if getattr(runner, "is_draft_worker", False):
        return
    server_args = getattr(runner, "server_args", None)
    if not _is_eagle3(runner, server_args):
        return
    path = getattr(server_args, "speculative_draft_model_path", None)
    try:
        declared_by = declares_layer_ids(path)
    except InputError as e:
        raise _ARMED["error"](e.file, e.field, f"whether the draft declares layer ids cannot be told ({e.problem}), "
                              f"and {_ARMED['reason']}, so SGLang would feed it stock wiring", e.fix) from None
    if declared_by is None:
        logger.error("eagle3-capture: the capture patch is not active in this process (%s); the draft %s declares no "
                     "layer ids, so it runs with stock SGLang wiring", _ARMED["reason"], path)
        return
    raise _ARMED["error"](declared_by, None, "sglang-eagle3-capture refuses to start EAGLE-3 with this draft: it "
                          f"declares the hidden states its fc was trained on, but {_ARMED['reason']}, so SGLang would "
                          "feed it stock wiring", f"{_ARMED['fix']}; or exclude the plugin (SGLANG_PLUGINS without "
                          "eagle3_capture) and serve a draft without a manifest to run stock wiring knowingly")


def _install() -> None:
    owner = getattr(importlib.import_module(MODULE), OWNER, None)
    original = getattr(owner, ATTR, None)
    if not callable(original):
        logger.error("eagle3-capture: cannot install the startup guard: %s.%s.%s is missing (%s)", MODULE, OWNER,
                     ATTR, _ARMED["reason"])
        return
    if getattr(original, "__eagle3_capture_guard__", False):
        return

    @functools.wraps(original)
    def initialize(self, *args, **kwargs):
        check(self)
        return original(self, *args, **kwargs)

    initialize.__eagle3_capture_guard__ = True
    _ARMED["original"] = (owner, vars(owner).get(ATTR))
    setattr(owner, ATTR, initialize)


def arm(reason: str, fix: str, error: Callable[..., Eagle3CaptureError]) -> None:
    """Refuse declared-id deployments in this process from now on (at once if SGLang's ModelRunner is imported,
    else when it is): ``reason`` says why the patch is not active, ``fix`` how to make it active, ``error`` is the
    error class raised."""
    _ARMED.update(reason=reason, fix=fix, error=error)
    when_imported(MODULE, _install)


def disarm() -> None:
    """Undo :func:`arm` (in-process use and tests)."""
    owner_and_value = _ARMED.pop("original", None)
    if owner_and_value is not None:
        owner, value = owner_and_value
        if value is None:
            delattr(owner, ATTR)
        else:
            setattr(owner, ATTR, value)
    _ARMED.clear()


def is_armed() -> bool:
    """True when the guard is installed on SGLang's ModelRunner in this process."""
    return "original" in _ARMED
