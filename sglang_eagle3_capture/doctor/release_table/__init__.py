"""The whole release table as the doctor reads it: the releases the plugin refuses (one module each, kept for the
doctor's stock readings and the README's support matrix; the plugin never imports them) before the supported ones
(:mod:`sglang_eagle3_capture.core.releases`), oldest first."""

from __future__ import annotations

from ...core import releases
from ...core.releases.schema import Release
from . import sglang_0_5_11, sglang_0_5_13_post1, sglang_0_5_15_post1

__all__ = ["all_releases", "get"]

# Oldest first; all older than every supported release.
_REFUSED = (sglang_0_5_11.RELEASE, sglang_0_5_13_post1.RELEASE, sglang_0_5_15_post1.RELEASE)


def all_releases() -> tuple[Release, ...]:
    """Every release with a file, supported or not, oldest first."""
    return (*_REFUSED, *releases.supported())


def get(version: str) -> Release:
    """The facts of ``version``; KeyError naming the known releases when it has no file."""
    for r in all_releases():
        if r.version == version:
            return r
    raise KeyError(f"no facts for SGLang {version}; known: {', '.join(r.version for r in all_releases())}")
