"""Every error this package raises: ``(file, field, problem, fix)``, rendered as one bounded, escaped line
``FILE: field 'FIELD': PROBLEM; fix: FIX`` (a ``None`` file or field left out); exit codes: docs/threat-model.md."""

from __future__ import annotations

import os
from typing import Any

# Bounds of each rendered part (characters): the fix is never cut below FIX_MAX, whatever the other parts hold.
FILE_MAX, FIELD_MAX, PROBLEM_MAX, FIX_MAX = 240, 160, 1600, 800


def shown(value: Any) -> str:
    """A path or string for a one-line message, every unprintable code point escaped (``\\x1b``, ``\\udcff``)."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    s = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    return s if s.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def brief(value: Any, limit: int = 120) -> str:
    """``repr(value)`` escaped and cut to about ``limit`` characters (long containers cut before they are rendered)."""
    if isinstance(value, (list, tuple)) and len(value) > 12:
        head = ", ".join(brief(v, 24) for v in value[:8])
        text = f"[{head}, ... ({len(value)} items)]"
    elif isinstance(value, dict) and len(value) > 12:
        head = ", ".join(f"{brief(k, 24)}: {brief(v, 24)}" for k, v in list(value.items())[:6])
        text = f"{{{head}, ... ({len(value)} keys)}}"
    elif isinstance(value, str) and len(value) > limit:
        text = repr(value[:limit]) + f"... ({len(value)} characters)"
    else:
        try:
            text = repr(value)
        except RecursionError:  # a structure nested past the interpreter's limit
            text = f"<{type(value).__name__} nested too deeply>"
    return cut(shown(text), limit + 40)


def cut(text: str, limit: int, *, keep_end: bool = False) -> str:
    """``text`` bounded to about ``limit`` characters; ``keep_end`` drops the middle instead (keeps a file name)."""
    if len(text) <= limit:
        return text
    if keep_end:
        half = max(limit // 2 - 8, 8)
        return f"{text[:half]}...{text[-half:]}"
    return f"{text[:limit]}... ({len(text)} characters)"


class Eagle3CaptureError(Exception):
    exit_code = 2

    def __init__(self, file: Any, field: str | None, problem: str, fix: str) -> None:
        super().__init__(file, field, problem, fix)  # args: so the error pickles across SGLang's processes
        self.file = None if file is None else shown(file)
        self.field = None if field is None else shown(field)
        self.problem = str(problem)
        self.fix = str(fix)

    def __str__(self) -> str:
        parts = [cut(self.file, FILE_MAX, keep_end=True)] if self.file is not None else []
        parts += [f"field '{cut(self.field, FIELD_MAX, keep_end=True)}'"] if self.field is not None else []
        return f"{': '.join([*parts, cut(shown(self.problem), PROBLEM_MAX)])}; fix: {cut(shown(self.fix), FIX_MAX)}"


class InputError(Eagle3CaptureError, ValueError):
    """Bad input the user can correct (exit status 2); ``file`` is ``None`` for a command-line option."""


class AmbiguousLayerIds(InputError):
    """Ids whose meaning depends on the release or trainer (exit status 3); ``readings`` lists every meaning."""

    exit_code = 3

    def __init__(self, file: Any, field: str | None, problem: str, fix: str, readings: tuple | list = ()) -> None:
        super().__init__(file, field, problem, fix)
        self.args = (file, field, problem, fix, tuple(readings))
        self.readings = tuple(readings)


class DeploymentError(Eagle3CaptureError, ValueError):
    """A deployment the engine must not run as configured (at startup, or by the first-batch self-check)."""


class PatchError(Eagle3CaptureError, RuntimeError):
    """The installed SGLang does not have the shape a patch was written against."""


class UnsupportedSGLangVersion(Eagle3CaptureError, RuntimeError):
    """The installed SGLang is not a release this package supports."""
