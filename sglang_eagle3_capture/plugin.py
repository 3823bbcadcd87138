"""SGLang plugin entry point: ``register()`` (group ``sglang.srt.plugins``, name ``eagle3_capture``).

SGLang 0.5.23's ``sglang.srt.plugins.load_plugins()`` calls it once per process: in the launcher
(``Engine.__init__``, ``launch_server``, ``sglang serve``), in every scheduler / TP worker
(``managers/scheduler.py::run_scheduler_process``, whose models are the ones patched), the DP controller
and the detokenizer. ``register()`` itself imports no SGLang model code: it arms a trigger that applies
the target capture patch and the draft-head loader patch right after ``model_runner_components/spec_aux_hidden_state.py`` is imported, which happens
only in processes that build a ``ModelRunner`` (before any model is resolved or loaded). Processes
that never run a model pay nothing.

``load_plugins`` logs and swallows exceptions raised here. So a patch that cannot be applied installs
a startup guard (:func:`sglang_eagle3_capture.patch.apply_guard`) that refuses EAGLE-3 on DeepSeek-family
targets, and the patched resolution re-checks :func:`~sglang_eagle3_capture.patch.is_patched`.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import os
import sys
from typing import Callable

logger = logging.getLogger(__name__)

TRIGGER_MODULE = "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state"


class _RunAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``action`` once, right after ``name`` is first executed (standard-library import machinery)."""

    def __init__(self, name: str, action: Callable[[], None]) -> None:
        self.name, self.action, self._loader = name, action, None

    def find_spec(self, fullname, path=None, target=None):
        """Claim ``name`` once; the real finders locate it, this object only wraps its loader."""
        if fullname != self.name or self._loader is not None:
            return None
        sys.meta_path.remove(self)  # one-shot; also lets importlib find the real spec below
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self._loader, spec.loader = spec.loader, self
        return spec

    def __getattr__(self, name):  # get_source, get_filename, is_package, ... of the real loader
        loader = self.__dict__.get("_loader")
        if loader is None:
            raise AttributeError(name)
        return getattr(loader, name)

    def create_module(self, spec):
        """Delegate to the real loader."""
        return self._loader.create_module(spec)

    def exec_module(self, module):
        """Execute the module, then run the action."""
        self._loader.exec_module(module)
        self.action()


def _when_imported(name: str, action: Callable[[], None]) -> None:
    if name in sys.modules:
        action()
    elif not any(isinstance(f, _RunAfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _RunAfterImport(name, action))


def _apply() -> None:
    """Apply the target capture patch and the draft-head loader patch; never raise into SGLang's import."""
    from . import draft_head, patch
    from ._compat import installed_sglang_version

    patched = []
    try:
        if patch.apply():
            patched.append(patch.describe())
    except Exception as e:  # noqa: BLE001 - runs inside SGLang's own import of its ModelRunner: never break it
        # PatchError (a changed seam) or an import failure of deepseek_v2: refuse EAGLE-3 on DeepSeek at
        # startup instead, and leave every other deployment running.
        guarded = patch.apply_guard(f"the capture patch does not fit this SGLang ({e})")
        logger.exception("eagle3-capture: target capture not patched: %s (startup guard %s; pid %d)", e,
                         "installed" if guarded else "NOT installed", os.getpid())
    try:
        if draft_head.apply_draft_head_patch():
            patched.append("the EAGLE-3 draft-head loader (sglang_eagle3_capture.draft_head)")
    except Exception as e:  # noqa: BLE001 - same reason; the draft then loads as stock SGLang loads it
        logger.exception("eagle3-capture: draft-head loader not patched: %s (pid %d)", e, os.getpid())
    if patched:
        logger.info("eagle3-capture: patched %s (sglang %s, pid %d, tp_rank %s)", "; ".join(patched),
                    installed_sglang_version(), os.getpid(), patch.current_tp_rank())


def register() -> None:
    """Entry point: check the SGLang version and arm the patches in this process (idempotent).

    The target capture patch (:mod:`sglang_eagle3_capture.patch`) and the draft-head loader patch
    (:mod:`sglang_eagle3_capture.draft_head`) are applied when SGLang imports its ModelRunner
    components (at once if already imported), with one INFO line per process: what was patched, the
    SGLang version, pid and TP rank (``None`` until SGLang publishes it). Outside the supported SGLang range it raises
    :class:`~sglang_eagle3_capture._compat.UnsupportedSGLangVersion` after arming the startup guard.
    """
    from ._compat import UnsupportedSGLangVersion, check_sglang_version

    try:
        check_sglang_version()
    except UnsupportedSGLangVersion as e:
        from . import patch

        reason = str(e)  # Python unbinds ``e`` when this block ends; the guard may run much later

        def guard() -> None:
            patch.apply_guard(reason)

        _when_imported(TRIGGER_MODULE, guard)
        logger.error("eagle3-capture: not patching (pid %d): %s", os.getpid(), e)
        raise
    _when_imported(TRIGGER_MODULE, _apply)
