"""Import-free facts per SGLang release, and the one registry of them.

Each release is one module ``sglang_X_Y_Z.py`` defining ``RELEASE`` (:class:`~.schema.Release`) and
one line in :data:`_MODULES`. Nothing else in the package names a release: code asks this registry.

- :func:`supported`: the releases the plugin patches (oldest first);
- :func:`get`: the facts of one release (supported or only known to the doctor);
- :func:`check_sglang_version`: the installed release's facts, or :class:`UnsupportedSGLangVersion`
  naming the supported list and the fix.
"""

from __future__ import annotations

import importlib
from importlib import metadata

from ..errors import UnsupportedSGLangVersion
from .schema import EngineReader, Release, Seam

__all__ = ["EngineReader", "Release", "Seam", "other_engines", "UnsupportedSGLangVersion", "all_releases", "check_sglang_version", "get",
           "installed_or_newest", "installed_sglang_version", "newest", "supported", "supported_versions"]

# One line per release file, oldest first.
_MODULES = (
    "sglang_0_5_11",
    "sglang_0_5_13_post1",
    "sglang_0_5_15_post1",
    "sglang_0_5_17",
    "sglang_0_5_18",
    "sglang_0_5_19",
    "sglang_0_5_20",
    "sglang_0_5_21",
    "sglang_0_5_22",
    "sglang_0_5_23",
)
_RELEASES: tuple[Release, ...] = tuple(importlib.import_module(f".{m}", __name__).RELEASE for m in _MODULES)
# Other engines whose reading of a draft config the doctor shows next to SGLang's.
_OTHER_ENGINES = ("vllm_0_33",)


def other_engines() -> tuple[EngineReader, ...]:
    """Readers of other serving engines (vLLM), in table order."""
    return tuple(r for m in _OTHER_ENGINES for r in importlib.import_module(f".{m}", __name__).READERS)


def all_releases() -> tuple[Release, ...]:
    """Every release with a file, supported or not, oldest first."""
    return _RELEASES


def supported() -> tuple[Release, ...]:
    """The releases the plugin patches, oldest first."""
    return tuple(r for r in _RELEASES if r.supported)


def supported_versions() -> tuple[str, ...]:
    """Version strings of :func:`supported`."""
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


def installed_or_newest() -> Release:
    """The installed release when supported, else the newest supported: whose seams to probe, guard or revert
    (never whose seams to patch: :func:`check_sglang_version` decides that)."""
    found = installed_sglang_version()
    return next((r for r in supported() if r.version == found), newest())


def _install_hint() -> str:
    return " or ".join(f"pip install sglang=={v}" for v in supported_versions())


def check_sglang_version(version: str | None = None) -> Release:
    """The facts of the installed SGLang (or ``version``), or :class:`UnsupportedSGLangVersion` naming the fix.

    Example::

        >>> check_sglang_version(newest().version).version == newest().version
        True
    """
    found = installed_sglang_version() if version is None else version
    if found is None:
        raise UnsupportedSGLangVersion(f"sglang is not installed in this environment; install a supported release: "
                                       f"{_install_hint()}")
    release = next((r for r in supported() if r.version == found), None)
    if release is None:
        raise UnsupportedSGLangVersion(
            f"sglang {found} is not supported by sglang-eagle3-capture (supported: {', '.join(supported_versions())}). "
            f"The capture patch was checked only against those sources; install a supported release, e.g. "
            f"pip install sglang=={newest().version}")
    return release
