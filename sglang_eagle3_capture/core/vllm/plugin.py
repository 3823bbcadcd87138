"""vLLM plugin entry point: ``register()`` (group ``vllm.general_plugins``, name ``eagle3_capture``), run in every vLLM
process. It never raises (a raising plugin stops vLLM) and imports no vLLM module: it arms the gate, the capture patch
and the acceptance alarm for when vLLM imports their modules (docs/vllm.md, "How the plugin hooks vLLM")."""

from __future__ import annotations

import logging
import os

from packaging.version import InvalidVersion, Version

from .. import releases, seams, selfcheck
from ..after_import import when_imported
from ..logs import get_logger
from ..releases.schema import VllmRelease
from . import wiring

logger = get_logger("sglang_eagle3_capture")


def _log_to_stderr() -> None:
    """vLLM configures only its own logger: give this package's INFO lines (the startup report, the self-check's pass)
    a handler in vLLM's processes, once."""
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [eagle3-capture] %(message)s",
                                               "%m-%d %H:%M:%S"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _patch(release: VllmRelease, roles: tuple[str, ...], name: str, wrappers: dict | None = None) -> seams.Patch:
    chosen = tuple(s for s in release.seams if s.role in roles)
    wrappers = wiring.WRAPPERS if wrappers is None else wrappers
    return seams.Patch(name, chosen, lambda seam, original: wrappers[seam.role](original))


def probe_release(release: VllmRelease) -> list[str]:
    """Import and probe every seam of ``release``; one ``Owner.attr: problem`` line per seam that does not fit."""
    problems = []
    for seam in release.seams:
        try:
            seams.probe(seam, seams.owner_of(seam, import_=True))
        except Exception as e:  # noqa: BLE001 - a missing module, class, attribute or a changed signature alike
            problems.append(f"{seam.name}: {type(e).__name__}: {e}")
    return problems


def _newer(version: str | None) -> bool:
    try:
        return version is not None and Version(Version(version).public) > Version(releases.vllm_supported()[-1].version)
    except InvalidVersion:
        return False


def _apply_capture(release: VllmRelease, unverified: str | None) -> None:
    """At the runner's import: the capture patch, all or nothing; a seam that does not fit leaves the gate to refuse."""
    if unverified is not None:
        problems = probe_release(release)
        if problems or not selfcheck.enabled():
            why = ("; ".join(problems) if problems else
                   f"{selfcheck.ENV}=0 turns off the self-check that stands in for it")
            wiring.set_state(None, f"vLLM {unverified} is newer than the vLLM release table and {why}")
            logger.error("eagle3-capture: not patching vLLM %s (pid %d): %s", unverified, os.getpid(), why)
            return
        logger.warning("eagle3-capture: vLLM %s is newer than the vLLM release table (newest verified: %s); every seam "
                       "probed clean, so it is patched as %s UNVERIFIED and the first-batch self-check proves the "
                       "wiring on the first batch of every worker (pid %d)", unverified, release.version,
                       release.version, os.getpid())
    try:
        seams.apply(_patch(release, ("vllm.resolve", "vllm.feed"), "vllm-capture"))
    except Exception as e:  # noqa: BLE001 - inside vLLM's import of its runner: never break it; the gate refuses
        wiring.set_state(None, f"the capture patch does not fit this vLLM ({e})")
        logger.error("eagle3-capture: vLLM capture not patched (pid %d): %s", os.getpid(), e)
        return
    wiring.set_state(release, None)
    patched = ", ".join(s.name for s in release.seams if s.role in ("vllm.resolve", "vllm.feed"))
    logger.info("eagle3-capture: patched %s (vllm %s, pid %d)", patched, releases.installed_vllm_version(), os.getpid())


def _apply_metrics(release: VllmRelease) -> None:
    """The acceptance alarm on vLLM's counters (observability: imported only here, when vLLM's metrics module is)."""
    from ...observe import acceptance

    try:
        seams.apply(_patch(release, ("vllm.metrics.init", "vllm.metrics.observe"), "vllm-metrics",
                           acceptance.VLLM_WRAPPERS))
    except Exception as e:  # noqa: BLE001 - metrics never stop a server
        logger.warning("eagle3-capture: no acceptance alarm on vLLM's counters (pid %d): %s", os.getpid(), e)


def _apply_gate(release: VllmRelease) -> None:
    try:
        seams.apply(_patch(release, ("vllm.gate",), "vllm-gate"))
    except Exception as e:  # noqa: BLE001 - never break vLLM's import; logged loudly
        logger.error("eagle3-capture: the startup gate is not installed (pid %d): %s", os.getpid(), e)


def register() -> None:
    """Entry point: arm the gate and, for a supported (or probe-clean newer) vLLM, the capture patch (module doc).
    Never raises: vLLM's ``load_general_plugins`` does not catch what a plugin's function raises (it would stop every
    vLLM process, with or without a draft)."""
    try:
        _register()
    except Exception as e:  # noqa: BLE001 - see the docstring; logged loudly, and nothing is patched
        logger.exception("eagle3-capture: the vLLM plugin did not arm (pid %d): %s", os.getpid(), e)


def _register() -> None:
    _log_to_stderr()
    found = releases.installed_vllm_version()
    release = releases.vllm_get(found)
    newest = releases.vllm_supported()[-1]
    gate_release = release if release is not None and release.seams else newest
    when_imported(gate_release.seam("vllm.gate").module, lambda: _apply_gate(gate_release))
    if release is not None and release.supported:
        wiring.set_state(release, "the V1 model runner was never imported in this process")
        if release.has("vllm.resolve"):  # a release without the V1 runner: the gate verifies Model Runner V2
            when_imported(release.trigger_module, lambda: _apply_capture(release, None))
        when_imported(release.seam("vllm.metrics.init").module, lambda: _apply_metrics(release))
    elif _newer(found):
        # newer than the table: the V1 capture patch of the newest release that has one, when its seams probe clean
        # (Model Runner V2 is verified only on releases in the table)
        v1 = [r for r in releases.vllm_supported() if r.has("vllm.resolve")][-1]
        wiring.set_state(None, "the V1 model runner was never imported in this process")
        when_imported(v1.trigger_module, lambda: _apply_capture(v1, found))
    else:
        why = release.refused_because if release is not None else "not in the vLLM release table"
        wiring.set_state(release, f"vLLM {found} is not served: {why}")
        logger.info("eagle3-capture: vLLM %s is not served (%s); drafts that declare layer ids are refused at startup "
                    "(pid %d)", found, why, os.getpid())
