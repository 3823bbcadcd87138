"""SGLang plugin entry point: ``register()`` (group ``sglang.srt.plugins``, name ``eagle3_capture``).

``load_plugins()`` calls it once in every SGLang process; it imports no model code and arms a trigger (the release's
``trigger_module``, imported only by processes that build a ``ModelRunner``) that applies the patches, so other
processes pay nothing (docs/how-it-works.md; benchmarks/bench_import.py). ``load_plugins`` swallows exceptions, so a
failure arms the startup guard (:mod:`.guard`) instead. A release newer than the table is served unverified only
when every seam probes clean and the self-check is on (docs/self-check.md).

Why not SGLang's ``HookRegistry`` (``sglang.srt.plugins.hook_registry``): ``apply_hooks()`` resolves every target
with ``pkgutil.resolve_name`` in every process (model imports in the launcher and detokenizer), applies targets one
by one and swallows a failing one (a half-applied capture), probes no parameter names and has no revert. Nor
``SGLANG_EXTERNAL_MODEL_PACKAGE``: its subclasses change the class names SGLang keys behaviour on (MLA detection for
the draft) and exclude every other external package.
"""

from __future__ import annotations

import os

from .. import releases, switches
from ..after_import import when_imported
from ..errors import DeploymentError, UnsupportedSGLangVersion
from ..logs import get_logger
from ..releases.schema import Release
from . import guard
from .runtime import current_tp_rank

logger = get_logger(__name__)


def _apply() -> None:
    """Apply the target capture patch and the draft-head loader patch; never raise into SGLang's import."""
    patched = []
    try:
        from . import target  # at the trigger: only a process that builds a ModelRunner imports the capture

        if target.apply():
            patched.append(target.describe())
    except Exception as e:  # noqa: BLE001 - runs inside SGLang's own import of its ModelRunner: never break it
        # The resolution seam does not fit (a family that does not fit is left out by target.apply itself, and
        # refused by name at startup): refuse declared drafts at startup instead, leave every other deployment running.
        guard.arm(f"the capture patch does not fit this SGLang ({e})",
                  "reinstall sglang-eagle3-capture for this SGLang release, or serve with a supported one",
                  DeploymentError)
        logger.exception("eagle3-capture: target capture not patched: %s (startup guard %s; pid %d)", e,
                         "installed" if guard.is_armed() else "NOT installed", os.getpid())
    try:
        from . import draft

        if draft.apply_draft_head_patch():
            patched.append("the EAGLE-3 draft-head loader (sglang_eagle3_capture.core.sglang.draft)")
    except Exception as e:  # noqa: BLE001 - same reason; the draft then loads as stock SGLang loads it
        logger.exception("eagle3-capture: draft-head loader not patched: %s (pid %d)", e, os.getpid())
    if patched:
        logger.info("eagle3-capture: patched %s (sglang %s, pid %d, tp_rank %s)", "; ".join(patched),
                    releases.installed_sglang_version(), os.getpid(), current_tp_rank())


def probe_release(release: Release) -> list[str]:
    """Import and probe every seam the plugin would patch under ``release`` (its own: resolution, draft side and
    self-check gate; every family's); one ``Owner.attr: problem`` line per seam that does not fit."""
    from .. import families, seams
    from . import selfcheck

    problems, every = [], (*release.seams, *selfcheck.gate_patch(release).seams,
                           *(s for f in families.all_families() for s in f.seams()))
    for seam in dict.fromkeys(every):  # each once (the gate's seams are the release's own)
        try:
            seams.probe(seam, seams.owner_of(seam, import_=True))
        except Exception as e:  # noqa: BLE001 - a missing module, class, attribute or a changed signature alike
            problems.append(f"{seam.name}: {type(e).__name__}: {e}")
    return problems


def _refuse_newer(found: str, why: str) -> UnsupportedSGLangVersion:
    newest = releases.newest().version
    error = UnsupportedSGLangVersion(None, None, f"sglang {found} is newer than the releases sglang-eagle3-capture "
                                     f"was verified against ({', '.join(releases.supported_versions())}) and {why}",
                                     f"install a supported release, e.g. pip install sglang=={newest}")
    guard.arm(error.problem, error.fix, UnsupportedSGLangVersion)
    logger.error("eagle3-capture: not patching (pid %d): %s", os.getpid(), error)
    return error


def _apply_newer() -> None:
    """At the trigger: probe every seam of the newest release; serve the installed (newer) SGLang unverified only
    if all fit."""
    found, newest = releases.installed_sglang_version(), releases.newest()
    if releases.unverified() == found:  # accepted already (register() ran twice)
        _apply()
        return
    problems = probe_release(newest)
    if problems:
        _refuse_newer(found, f"{len(problems)} of the seams the plugin patches do not fit it: {'; '.join(problems)}")
        return
    releases.accept_unverified(found)
    logger.warning("eagle3-capture: sglang %s is newer than the release table (newest verified: %s); every seam probed "
                   "clean (names and parameter names), so it is patched as %s UNVERIFIED and the first-batch "
                   "self-check proves the wiring on the first extend batch of every target process (pid %d)", found,
                   newest.version, newest.version, os.getpid())
    _apply()


def _apply_metrics() -> None:
    """The acceptance metrics patch (:mod:`...observe.metrics`), when SGLang's scheduler module has been executed; a
    seam that does not fit costs the metrics only (one WARNING), never the capture or the server."""
    try:
        from ...observe import metrics  # observability: imported only once the scheduler module is

        metrics.apply()
    except Exception as e:  # noqa: BLE001 - metrics never stop a server
        logger.warning("eagle3-capture: no per-position acceptance metrics: %s (pid %d)", e, os.getpid())


def _arm_metrics() -> None:
    when_imported(releases.installed_or_newest().seam("metrics.init").module, _apply_metrics)


def register() -> None:
    """Entry point: check the SGLang version and arm the patches in this process (idempotent); they apply when SGLang
    imports the trigger module (at once if already imported). Outside the supported releases it arms the startup guard
    and raises :class:`~..errors.UnsupportedSGLangVersion`, except for a newer release (module doc)."""
    found = releases.installed_sglang_version()
    if releases.is_newer_than_table(found) and releases.unverified() != found:
        try:
            check = switches.read(switches.SELFCHECK)
        except DeploymentError as e:  # a value the switch parser does not read: not the check it needs
            raise _refuse_newer(found, e.problem) from None
        if not check:
            raise _refuse_newer(found, f"{switches.SELFCHECK.name}=0 turns off the first-batch self-check that stands "
                                       "in for the missing verification")
        when_imported(releases.newest().trigger_module, _apply_newer)
        _arm_metrics()
        return
    try:
        release = releases.check_sglang_version()
    except UnsupportedSGLangVersion as e:
        guard.arm(e.problem, e.fix or "install a supported SGLang release", UnsupportedSGLangVersion)
        logger.error("eagle3-capture: not patching (pid %d): %s", os.getpid(), e)
        raise
    when_imported(release.trigger_module, _apply)
    _arm_metrics()
