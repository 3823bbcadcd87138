"""The one patch engine: every seam the package replaces in SGLang, target and draft side alike.

A :class:`Patch` is a named set of :class:`~.releases.schema.Seam` records and a ``wrap(seam, original)``.
:func:`apply` probes every original's parameter names before it replaces any, so a changed SGLang is left untouched
(:class:`~.errors.PatchError` names the seam). Replacements are class attributes, so every ``from ... import``
binding sees them; :func:`revert` puts back exactly what the class held.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable

from .errors import PatchError
from .releases.schema import Seam

_ABSENT = object()
_RELEASE_FIX = "serve with a supported SGLang release (the release table lists each seam this package patches)"
MARK = "__eagle3_capture__"  # set on every replacement function: is_patched() provenance for anyone reading


@dataclass(frozen=True)
class Patch:
    """Seams replaced together, all or nothing. ``wrap(seam, original)`` returns the replacement."""

    name: str
    seams: tuple[Seam, ...]
    wrap: Callable[[Seam, Any], Any]


# patch name -> [(owner, attr, what the owner's __dict__ held, the replacement set)]
_APPLIED: dict[str, list[tuple[Any, str, Any, Any]]] = {}


def owner_of(seam: Seam, *, import_: bool) -> Any:
    """The module or class that holds ``seam`` (importing the module when ``import_``), or None."""
    module = importlib.import_module(seam.module) if import_ else sys.modules.get(seam.module)
    if module is None or seam.owner is None:
        return module
    return getattr(module, seam.owner, None)


def probe(seam: Seam, owner: Any) -> Any:
    """The value the replacement will wrap, checked against the shape the seam records; raises PatchError. An
    inherited original that is already a replacement (another family's) is unwrapped, so no call runs two."""
    if owner is None:
        raise PatchError(None, seam.name, f"{seam.module}.{seam.owner} does not exist in this SGLang",
                         _RELEASE_FIX)
    if seam.params is None:
        if seam.attr in vars(owner):
            raise PatchError(None, seam.name, "already exists in this SGLang; the patch would shadow it",
                             _RELEASE_FIX)
        return None
    original = getattr(owner, seam.attr, _ABSENT)
    while getattr(original, MARK, False):  # inherited from a class another patch already wrapped: wrap SGLang's own
        original = original.__wrapped__
    if not inspect.isfunction(original):
        raise PatchError(None, seam.name, "is not a function in this SGLang", _RELEASE_FIX)
    params = tuple(inspect.signature(original).parameters)
    if params != seam.params:
        raise PatchError(None, seam.name, f"has parameters {params}, the patch was written for {seam.params}",
                         _RELEASE_FIX)
    return original


def _mark(value: Any) -> Any:
    if callable(value):
        setattr(value, MARK, True)
    return value


def is_applied(patch: Patch) -> bool:
    """True when every seam of ``patch`` holds this package's replacement (imports nothing)."""
    done = {(id(o), a): r for o, a, _, r in _APPLIED.get(patch.name, ())}
    for seam in patch.seams:
        owner = owner_of(seam, import_=False)
        key = (id(owner), seam.attr)
        if owner is None or key not in done or vars(owner).get(seam.attr, _ABSENT) is not done[key]:
            return False
    return True


def status(patch: Patch) -> str:
    """``Owner.attr=patched|original`` for each seam, for logs and errors."""
    done = {(id(o), a): r for o, a, _, r in _APPLIED.get(patch.name, ())}
    parts = []
    for seam in patch.seams:
        owner = owner_of(seam, import_=False)
        ours = owner is not None and done.get((id(owner), seam.attr), _ABSENT) is vars(owner).get(seam.attr, _ABSENT)
        parts.append(f"{seam.name}={'patched' if ours else 'original'}")
    return ", ".join(parts)


def apply(patch: Patch) -> bool:
    """Install ``patch``; False when it was already installed. Probes every seam before replacing any."""
    if is_applied(patch):
        return False
    revert(patch)  # a partial state (e.g. a guard on one seam): start from SGLang's own attributes
    owners = [owner_of(s, import_=True) for s in patch.seams]
    originals = [probe(s, o) for s, o in zip(patch.seams, owners)]
    record = _APPLIED.setdefault(patch.name, [])
    for seam, owner, original in zip(patch.seams, owners, originals):
        replacement = _mark(patch.wrap(seam, original))
        record.append((owner, seam.attr, vars(owner).get(seam.attr, _ABSENT), replacement))
        setattr(owner, seam.attr, replacement)
    return True


def revert(patch: Patch) -> None:
    """Put back exactly what ``patch`` replaced (an attribute the owner did not define itself is deleted)."""
    for owner, attr, held, _ in reversed(_APPLIED.pop(patch.name, [])):
        if held is _ABSENT:
            if attr in vars(owner):
                delattr(owner, attr)
        else:
            setattr(owner, attr, held)


def describe(patch: Patch) -> str:
    """The seams of ``patch`` in one line."""
    return ", ".join(s.name for s in patch.seams)


def attr_path(obj: Any, path: str) -> Any:
    """``obj.a.b`` for ``path`` "a.b": a family's module name may reach into a pair (LongCat-Flash's
    ``input_layernorm.0``, an ``nn.ModuleList`` item)."""
    return functools.reduce(getattr, path.split("."), obj)
