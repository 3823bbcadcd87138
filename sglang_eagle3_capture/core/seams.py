"""The one patch engine: every seam the package replaces in SGLang (target and draft side), all or nothing, probed
before any is replaced, reverted to exactly what the class held (docs/how-it-works.md).
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
    return module if module is None or seam.owner is None else getattr(module, seam.owner, None)


def probe(seam: Seam, owner: Any) -> Any:
    """The original the replacement will wrap, checked against the seam's recorded shape (else PatchError); an
    inherited original that is already another family's replacement is unwrapped, so no call runs two."""
    if owner is None:
        raise PatchError(None, seam.name, f"{seam.module}.{seam.owner} does not exist in this SGLang", _RELEASE_FIX)
    if seam.params is None:
        if seam.attr in vars(owner):
            raise PatchError(None, seam.name, "already exists in this SGLang; the patch would shadow it", _RELEASE_FIX)
        return None
    original = getattr(owner, seam.attr, _ABSENT)
    while getattr(original, MARK, False):
        original = original.__wrapped__
    if not inspect.isfunction(original):
        raise PatchError(None, seam.name, "is not a function in this SGLang", _RELEASE_FIX)
    params = tuple(inspect.signature(original).parameters)
    if params != seam.params:
        raise PatchError(None, seam.name, f"has parameters {params}, the patch was written for {seam.params}",
                         _RELEASE_FIX)
    return original


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

    def ours(seam: Seam) -> bool:
        owner = owner_of(seam, import_=False)
        return owner is not None and done.get((id(owner), seam.attr), _ABSENT) is vars(owner).get(seam.attr, _ABSENT)
    return ", ".join(f"{s.name}={'patched' if ours(s) else 'original'}" for s in patch.seams)


def apply(patch: Patch) -> bool:
    """Install ``patch``; False when it was already installed. Probes every seam before replacing any."""
    if is_applied(patch):
        return False
    revert(patch)  # a partial state (e.g. a guard on one seam): start from SGLang's own attributes
    owners = [owner_of(s, import_=True) for s in patch.seams]
    originals = [probe(s, o) for s, o in zip(patch.seams, owners)]
    record = _APPLIED.setdefault(patch.name, [])
    for seam, owner, original in zip(patch.seams, owners, originals):
        replacement = patch.wrap(seam, original)
        if callable(replacement):
            setattr(replacement, MARK, True)
        record.append((owner, seam.attr, vars(owner).get(seam.attr, _ABSENT), replacement))
        setattr(owner, seam.attr, replacement)
    return True


def revert(patch: Patch) -> None:
    """Put back exactly what ``patch`` replaced (an attribute the owner did not define itself is deleted)."""
    for owner, attr, held, _ in reversed(_APPLIED.pop(patch.name, [])):
        if held is not _ABSENT:
            setattr(owner, attr, held)
        elif attr in vars(owner):
            delattr(owner, attr)


def describe(patch: Patch) -> str:
    return ", ".join(s.name for s in patch.seams)


def attr_path(obj: Any, path: str) -> Any:
    """``obj.a.b`` for "a.b": a family's module name may reach into a pair (LongCat-Flash's ``input_layernorm.0``)."""
    return functools.reduce(getattr, path.split("."), obj)
