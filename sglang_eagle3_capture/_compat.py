"""Which SGLang releases this package supports, and the runtime check.

The range is stated here once. The plugin refuses to patch an SGLang outside it, because the
patched seams (``DeepseekV2Model.forward``'s capture loop, ``set_eagle3_layers_to_capture``)
change shape between releases (see ../shared/notes/sglang-0.5.23-internals.md, section 1).
"""

from __future__ import annotations

from importlib import metadata

# Each entry: a release whose sources the patch and patches/sglang-<version>/ were checked against.
SUPPORTED_SGLANG_VERSIONS: tuple[str, ...] = ("0.5.23",)


class UnsupportedSGLangVersion(RuntimeError):
    """The installed SGLang is not one this package was checked against."""


def installed_sglang_version() -> str | None:
    """The installed ``sglang`` distribution's version, or ``None`` (read from metadata, no import)."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def check_sglang_version(version: str | None = None) -> str:
    """Return the SGLang version, or raise :class:`UnsupportedSGLangVersion` naming the fix.

    Example::

        >>> check_sglang_version("0.5.23")
        '0.5.23'
    """
    found = installed_sglang_version() if version is None else version
    if found is None:
        raise UnsupportedSGLangVersion(
            "sglang is not installed in this environment; install a supported release: "
            + " or ".join(f"pip install sglang=={v}" for v in SUPPORTED_SGLANG_VERSIONS)
        )
    if found not in SUPPORTED_SGLANG_VERSIONS:
        raise UnsupportedSGLangVersion(
            f"sglang {found} is not supported by sglang-eagle3-capture "
            f"(supported: {', '.join(SUPPORTED_SGLANG_VERSIONS)}). The capture patch was checked "
            "only against those sources; install a supported release, e.g. "
            f"pip install sglang=={SUPPORTED_SGLANG_VERSIONS[-1]}"
        )
    return found
