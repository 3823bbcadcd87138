"""Every error this package raises: ``(file, field, problem, fix)``, rendered by ``str(error)`` as one bounded,
escaped line::

    FILE: field 'FIELD': PROBLEM; fix: FIX

(``file`` or ``field`` may be ``None``: that part is left out). Tests and callers read ``.file``, ``.field``,
``.problem`` and ``.fix``; nothing parses the line. Each echoed part is escaped (:func:`shown`) and bounded on its own,
so a long path or key never pushes the fix out of the line.

The command line prints one line per error and exits with its class's :attr:`~Eagle3CaptureError.exit_code`; an
``OSError`` naming a file exits 2 as well, any other exception is a bug and exits 70. The classes stay ``ValueError``
/ ``RuntimeError`` subclasses, so callers that caught those keep working.
"""

from __future__ import annotations

import os
from typing import Any

# Bounds of each rendered part (characters): the fix is never cut below FIX_MAX, whatever the other parts hold.
FILE_MAX, FIELD_MAX, PROBLEM_MAX, FIX_MAX = 240, 160, 1600, 800


def shown(value: Any) -> str:
    """A path or string for a one-line message: as is when printable, else with every control character, lone
    surrogate or other unprintable code point escaped (``\\n``, ``\\x1b``, ``\\udcff``)."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    s = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def brief(value: Any, limit: int = 120) -> str:
    """``repr(value)`` escaped and cut to about ``limit`` characters, saying how long it was (bounded time: long
    lists, dicts and strings are cut before they are rendered)."""
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
    """``text`` bounded to about ``limit`` characters, saying how long it was; ``keep_end`` keeps the start and the
    end (a path's file name) and drops the middle."""
    if len(text) <= limit:
        return text
    if keep_end:
        half = max(limit // 2 - 8, 8)
        return f"{text[:half]}...{text[-half:]}"
    return f"{text[:limit]}... ({len(text)} characters)"


class Eagle3CaptureError(Exception):
    """Base class of every error raised by sglang-eagle3-capture: ``(file, field, problem, fix)``.

    Example::

        >>> str(InputError("draft/config.json", "hidden_size", "expected a positive integer, got -3",
        ...                "copy hidden_size from the draft's training config"))
        "draft/config.json: field 'hidden_size': expected a positive integer, got -3; fix: copy hidden_size from \
the draft's training config"
    """

    exit_code = 2

    def __init__(self, file: Any, field: str | None, problem: str, fix: str) -> None:
        super().__init__(file, field, problem, fix)  # args: so the error pickles across SGLang's processes
        self.file = None if file is None else shown(file)
        self.field = None if field is None else shown(field)
        self.problem = str(problem)
        self.fix = str(fix)

    def __str__(self) -> str:
        parts = []
        if self.file is not None:
            parts.append(cut(self.file, FILE_MAX, keep_end=True))
        if self.field is not None:
            parts.append(f"field '{cut(self.field, FIELD_MAX, keep_end=True)}'")
        parts.append(cut(shown(self.problem), PROBLEM_MAX))
        return f"{': '.join(parts)}; fix: {cut(shown(self.fix), FIX_MAX)}"


class InputError(Eagle3CaptureError, ValueError):
    """Bad input the user can correct (exit status 2): an option, a config, a manifest, a checkpoint, a sample or a
    dump setting; ``file`` and ``field`` say which (``file`` is ``None`` for a command-line option)."""


class AmbiguousLayerIds(InputError):
    """A config whose ids mean different layers depending on the release or trainer it was trained with
    (exit status 3); ``readings`` lists every meaning with who trains that way."""

    exit_code = 3

    def __init__(self, file: Any, field: str | None, problem: str, fix: str, readings: tuple | list = ()) -> None:
        super().__init__(file, field, problem, fix)
        self.args = (file, field, problem, fix, tuple(readings))
        self.readings = tuple(readings)


class DeploymentError(Eagle3CaptureError, ValueError):
    """A deployment the engine must not run as configured: raised at startup in SGLang's or vLLM's processes (a
    capture the plugin refuses to wire, a draft it must not serve), and by the first-batch self-check."""


class PatchError(Eagle3CaptureError, RuntimeError):
    """The installed SGLang does not have the shape a patch was written against."""


class UnsupportedSGLangVersion(Eagle3CaptureError, RuntimeError):
    """The installed SGLang is not a release this package supports."""
