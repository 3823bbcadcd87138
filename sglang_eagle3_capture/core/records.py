"""The validator engine: a user record is declared once (its fields, types, bounds, the fix for each, and what
happens to a key it does not know) and read by :func:`read`, which raises the record's error naming the file, the
field and the fix.

Two unknown-key policies: ``refuse`` where a value changes what the draft's fc receives (the manifest's top level
and ``target``), ``keep`` everywhere else (HF configs, metadata), so a file written by a newer tool still loads.
A record declared ``metadata=True`` is never refused at all: :func:`read` keeps it as it is and :func:`problems`
lists what a reader may want to show (escaped) next to it.

The declarations live in :mod:`sglang_eagle3_capture.core.schemas`; ``schemas.ALL`` lists them for the property tests.

Example::

    >>> rec = Record("example", (Field("n", Int(lo=1), "set n to a positive integer"),), unknown="refuse")
    >>> read(rec, {"n": 3}, file="x.json")
    {'n': 3}
    >>> read(rec, {"n": 0}, file="x.json")
    Traceback (most recent call last):
    ...
    sglang_eagle3_capture.core.errors.InputError: x.json: field 'n': expected an integer >= 1, got 0; fix: set n to a \
positive integer
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from .errors import InputError, brief
from .layer_ids import is_int

MAX_ITEMS = 1_000_000  # no list in a file read here is longer (a vocabulary map is the longest)


class Bad(Exception):
    """A value a kind refuses: ``(path, problem)``; :func:`read` turns it into the record's error."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path, self.problem = path, problem


def _sub(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


class Kind:
    """What a field's value may be. ``check`` returns the value (normalized) or raises :class:`Bad`."""

    def describe(self) -> str:
        raise NotImplementedError

    def check(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def _refuse(self, value: Any, path: str) -> Bad:
        return Bad(path, f"expected {self.describe()}, got {brief(value)}")


@dataclass(frozen=True)
class Int(Kind):
    lo: int | None = None
    hi: int | None = None

    def describe(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f"an integer in [{self.lo}, {self.hi}]"
        if self.lo is not None:
            return f"an integer >= {self.lo}"
        return "an integer" if self.hi is None else f"an integer <= {self.hi}"

    def check(self, value: Any, path: str) -> int:
        if not is_int(value) or (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise self._refuse(value, path)
        return value


@dataclass(frozen=True)
class Float(Kind):
    lo: float | None = None
    hi: float | None = None

    def describe(self) -> str:
        bounds = "" if self.lo is None and self.hi is None else f" in [{self.lo}, {self.hi}]"
        return f"a finite number{bounds}"

    def check(self, value: Any, path: str) -> float:
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi)):
            raise self._refuse(value, path)
        return value


@dataclass(frozen=True)
class Bool(Kind):
    def describe(self) -> str:
        return "true or false"

    def check(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self._refuse(value, path)
        return value


@dataclass(frozen=True)
class Str(Kind):
    nonempty: bool = False
    max_len: int = 10_000
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        return "a non-empty string" if self.nonempty else "a string"

    def check(self, value: Any, path: str) -> str:
        if (not isinstance(value, str) or (self.nonempty and not value) or len(value) > self.max_len
                or (self.choices and value not in self.choices)):
            raise self._refuse(value, path)
        return value


@dataclass(frozen=True)
class Const(Kind):
    value: Any

    def describe(self) -> str:
        return repr(self.value)

    def check(self, value: Any, path: str) -> Any:
        if type(value) is not type(self.value) or value != self.value:
            raise self._refuse(value, path)
        return value


@dataclass(frozen=True)
class Optional(Kind):
    """``kind`` or ``null``."""

    kind: Kind

    def describe(self) -> str:
        return f"{self.kind.describe()} or null"

    def check(self, value: Any, path: str) -> Any:
        return None if value is None else self.kind.check(value, path)


@dataclass(frozen=True)
class OneOf(Kind):
    """The first of ``kinds`` that takes the value."""

    kinds: tuple[Kind, ...]

    def describe(self) -> str:
        return " or ".join(k.describe() for k in self.kinds)

    def check(self, value: Any, path: str) -> Any:
        for kind in self.kinds:
            try:
                return kind.check(value, path)
            except Bad:
                continue
        raise self._refuse(value, path)


@dataclass(frozen=True)
class ListOf(Kind):
    item: Kind
    min_len: int = 0
    max_len: int = MAX_ITEMS

    def describe(self) -> str:
        least = "" if self.min_len == 0 else f"at least {self.min_len} of "
        return f"a list of {least}{self.item.describe()}"

    def check(self, value: Any, path: str) -> list:
        if not isinstance(value, list) or not self.min_len <= len(value) <= self.max_len:
            raise self._refuse(value, path)
        return [self.item.check(v, f"{path}[{i}]") for i, v in enumerate(value)]


@dataclass(frozen=True)
class MapOf(Kind):
    """An object whose keys are strings and whose values are all ``value``."""

    value: Kind
    max_len: int = MAX_ITEMS

    def describe(self) -> str:
        return f"an object of {self.value.describe()}"

    def check(self, value: Any, path: str) -> dict:
        if not isinstance(value, dict) or len(value) > self.max_len:
            raise self._refuse(value, path)
        return {k: self.value.check(v, _sub(path, k)) for k, v in value.items()}


@dataclass(frozen=True)
class Anything(Kind):
    def describe(self) -> str:
        return "any JSON value"

    def check(self, value: Any, path: str) -> Any:
        return value


@dataclass(frozen=True)
class Field:
    """One field: its ``kind``, the ``fix`` an error about it gives, whether it must be there (else ``default``)."""

    name: str
    kind: Kind
    fix: str
    required: bool = True
    default: Any = None


@dataclass(frozen=True)
class Record:
    """A user record: its fields, its unknown-key policy and the error class its readers raise.

    ``fix`` is what an error about the whole document (not an object, an unknown key) says to do."""

    name: str
    fields: tuple[Field, ...]
    unknown: Literal["refuse", "keep"] = "keep"
    error: type[InputError] = InputError
    fix: str = "check the file"
    metadata: bool = False

    def field(self, name: str) -> Field:
        return next(f for f in self.fields if f.name == name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)


@dataclass(frozen=True)
class Nested(Kind):
    """A value that is itself a record (``target`` in the manifest): read with that record's rules."""

    record: Record

    def describe(self) -> str:
        return f"an object ({self.record.name})"

    def check(self, value: Any, path: str) -> dict:
        return _read(self.record, value, path)


def _key(key: Any) -> str:
    return str(key) if isinstance(key, str) else brief(key, 40)


def _read(record: Record, doc: Any, path: str) -> dict:
    if not isinstance(doc, dict):
        raise Bad(path or "<document>", f"expected an object ({record.name}), got {_json_type(doc)}")
    known = record.names
    out: dict = {}
    for key, value in doc.items():
        if key not in known:
            if record.unknown == "refuse":
                raise Bad(_sub(path, _key(key)), f"unknown key (the {record.name} has only {', '.join(known)})")
            out[key] = value
    for f in record.fields:
        if f.name not in doc:
            if f.required:
                raise Bad(_sub(path, f.name), "missing")
            out[f.name] = f.default
            continue
        out[f.name] = f.kind.check(doc[f.name], _sub(path, f.name))
    return out


def _fix_for(record: Record, path: str) -> str:
    """The fix of the deepest declared field ``path`` names (``target.hidden_size`` -> target's hidden_size)."""
    rec, fix = record, record.fix
    for part in path.replace("[", ".[").split("."):
        if not part or part.startswith("["):
            continue
        f = next((f for f in rec.fields if f.name == part), None)
        if f is None:
            break
        fix = f.fix
        kind = f.kind.kind if isinstance(f.kind, Optional) else f.kind
        if not isinstance(kind, Nested):
            break
        rec = kind.record
    return fix


def read(record: Record, doc: Any, *, file: Any, prefix: str = "") -> Any:
    """``doc`` validated against ``record``: a dict of every declared field (defaults filled in) plus, under the
    ``keep`` policy, the unknown keys as they are. Raises ``record.error(file, field, problem, fix)``.

    A ``metadata`` record is never refused: ``doc`` comes back as it is (see :func:`problems`)."""
    if record.metadata:
        return doc
    try:
        return _read(record, doc, prefix)
    except Bad as e:
        raise record.error(file, e.path, e.problem, _fix_for(record, e.path[len(prefix) + 1:] if prefix else e.path)
                           ) from None


def problems(record: Record, doc: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``(field, problem)`` for what ``doc`` holds that ``record`` would not take, unknown keys excluded under the
    ``keep`` policy (for showing metadata; nothing is refused)."""
    if not isinstance(doc, dict):
        return [(prefix or "<document>", f"expected an object, got {_json_type(doc)}")]
    out = []
    for f in record.fields:
        if f.name not in doc:
            if f.required:
                out.append((_sub(prefix, f.name), "missing"))
            continue
        try:
            f.kind.check(doc[f.name], _sub(prefix, f.name))
        except Bad as e:
            out.append((e.path, e.problem))
    return out


__all__ = ["Anything", "Bad", "Bool", "Const", "Field", "Float", "Int", "Kind", "ListOf", "MapOf", "Nested", "OneOf",
           "Optional", "Record", "Str", "is_int", "problems", "read"]
