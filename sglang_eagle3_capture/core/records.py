"""User records through msgspec: a :class:`Record` per file or block, each field with its kind, bounds and fix;
:func:`read` converts strictly and raises ``InputError`` naming the field as users write it (``layer_ids[2]``).
Declarations: ``core/schemas/``; the design: docs/development.md ("Reading user input")."""

from __future__ import annotations

import functools
import re
import sys
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

import msgspec
from msgspec import Meta, Struct

from .errors import InputError, brief

SURROGATE = "a string holds a lone surrogate such as \\ud800 (not valid Unicode)"  # msgspec cannot say which
MAX_ITEMS = 1_000_000  # no list in a file read here is longer (a vocabulary map is the longest)
FINITE = Meta(ge=-sys.float_info.max, le=sys.float_info.max)  # NaN fails every comparison: refused with infinity
_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false", "null": "null",
          "array": "a list", "object": "an object"}


def fix(kind: Any, text: str) -> Any:
    return Annotated[kind, Meta(extra={"fix": text})]


def integer(lo: int | None = None, hi: int | None = None) -> Any:
    return Annotated[int, Meta(ge=lo, le=hi)]


def number(lo: float | None = None, hi: float | None = None, positive: bool = False) -> Any:
    """A finite number in ``[lo, hi]`` (above 0 if ``positive``)."""
    low = {"gt": 0} if positive else {"ge": FINITE.ge if lo is None else lo}
    return Annotated[float, Meta(le=FINITE.le if hi is None else hi, **low)]


def text(max_len: int = 10_000, nonempty: bool = False) -> Any:
    return Annotated[str, Meta(min_length=1 if nonempty else None, max_length=max_len)]


def list_of(item: Any, min_len: int = 0, max_len: int = MAX_ITEMS) -> Any:
    return Annotated[list[item], Meta(min_length=min_len or None, max_length=max_len)]


def map_of(value: Any, max_len: int = MAX_ITEMS) -> Any:
    return Annotated[dict[str, value], Meta(max_length=max_len)]


class Custom:
    """A kind msgspec does not know (a tensor): :meth:`check` returns the value or raises ``ValueError``; ``takes``
    names the JSON types it may take (for the property tests)."""

    __slots__ = ("value",)
    takes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, value: Any) -> None:
        self.value = value

    @classmethod
    def check(cls, value: Any) -> Any:
        raise NotImplementedError


class Exactly(Custom):
    """Exactly the bool ``const`` (msgspec's ``Literal`` takes bools only in its newer releases)."""

    const: ClassVar[bool] = True
    takes = ("bool",)

    @classmethod
    def check(cls, value: Any) -> Any:
        if value is not cls.const:
            raise ValueError(f"expected {str(cls.const).lower()}, got {brief(value)}")
        return value


def exactly(value: bool) -> type[Exactly]:
    return type(f"Exactly{value}", (Exactly,), {"const": value, "__slots__": ()})


def _hook(kind: type, value: Any) -> Any:
    if isinstance(kind, type) and issubclass(kind, Custom):
        try:
            return kind(kind.check(value))
        except msgspec.ValidationError as e:  # a nested conversion: its path goes under the field's
            raise ValueError(str(e)) from None
    raise NotImplementedError


class Record(Struct):
    fix: ClassVar[str] = "check the file"
    metadata: ClassVar[bool] = False
    name: ClassVar[str] = ""
    unknown: ClassVar[Literal["refuse", "keep"]] = "keep"
    names: ClassVar[tuple[str, ...]] = ()

    @classmethod
    @functools.cache
    def fields(cls) -> tuple[msgspec.structs.FieldInfo, ...]:
        return msgspec.structs.fields(cls)

    @classmethod
    def fix_of(cls, name: str) -> str:
        return next(_strip(f.type)[1] for f in cls.fields() if f.encode_name == name)

    @classmethod
    def kind_of(cls, name: str) -> Any:
        return next(_strip(f.type)[0] for f in cls.fields() if f.encode_name == name)


def record(fix: str = "check the file", *, metadata: bool = False, name: str | None = None):
    """Declare a :class:`Record`: the fix for the whole document (an unknown key), whether metadata, its name."""
    def declare(cls: type[Record]) -> type[Record]:
        cls.fix, cls.metadata, cls.name = fix, metadata, name or cls.__name__
        cls.unknown = "refuse" if cls.__struct_config__.forbid_unknown_fields else "keep"
        cls.names = tuple(f.encode_name for f in cls.fields())
        return cls
    return declare


def _strip(kind: Any) -> tuple[Any, str | None]:
    said = None
    while get_origin(kind) is Annotated:
        said = next((m.extra["fix"] for m in kind.__metadata__ if isinstance(m, Meta) and "fix" in (m.extra or {})),
                    said)
        kind = get_args(kind)[0]
    return kind, said


def _is_struct(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, Struct)


def _pick(kind: Any, node: Any) -> Any:
    """The member of a union that ``node`` (an object, a list) went to."""
    members = get_args(kind) if get_origin(kind) in (Union, UnionType) else (kind,)
    for member in (_strip(m)[0] for m in members):
        if isinstance(node, dict) and (get_origin(member) is dict or _is_struct(member)):
            return member
        if isinstance(node, list) and get_origin(member) is list:
            return member
    return kind


def _takes(value: Any, kind: Any) -> bool:
    try:
        msgspec.convert(value, kind, strict=True, dec_hook=_hook)
    except (msgspec.ValidationError, ValueError):  # UnicodeEncodeError (a lone surrogate) is a ValueError
        return False
    return True


def _locate(rec: type[Record], doc: Any, message: str) -> tuple[str, str, str]:
    """``(field, problem, fix)`` of a msgspec error: ``$.a.b[2]`` -> ``a.b[2]``, a ``[...]`` found by converting each
    value, the fix of the deepest declared field on the way."""
    problem, *ats = message.split(" - at `")
    on_key = bool(ats) and ats[-1].startswith("key` in `")  # a key that is not a string
    ats[-1:] = [ats[-1].removeprefix("key` in `")] if on_key else ats[-1:]
    parts = [p for at in reversed(ats) for p in re.findall(r"\.[^.\[]+|\[[^\]]*\]", at.rstrip("`").lstrip("$"))]
    missing = re.fullmatch(r"Object (contains unknown|missing required) field `(.*)`", problem, re.S)
    if missing:
        parts.append(f".{missing.group(2)}")
        problem = "missing" if "missing" in missing.group(1) else "unknown key"
    kind, node, path, said = rec, doc, "", rec.fix
    for part in parts:
        kind = _pick(_strip(kind)[0], node)
        if part == "[...]" and get_origin(kind) is dict and isinstance(node, dict):
            value = get_args(kind)[1]
            bad = next((k for k, v in node.items() if not _takes(v, value)), "<key>")
            path, node, kind = f"{path}.{bad}", node.get(bad), value
        elif part.startswith("["):
            path += part
            node = node[int(part[1:-1])] if isinstance(node, list) and part[1:-1].isdigit() else None
            kind = get_args(kind)[0] if get_origin(kind) is list else Any
        else:
            path += part
            f = next((f for f in kind.fields() if f.encode_name == part[1:]), None) if _is_struct(kind) else None
            node = node.get(part[1:]) if isinstance(node, dict) else None
            if f is None:
                if problem == "unknown key" and _is_struct(kind) and issubclass(kind, Record):
                    problem += f" (the {kind.name} has only {', '.join(kind.names)})"
                break
            kind, said = f.type, _strip(f.type)[1] or said
    if on_key and isinstance(node, dict):
        path, problem = f"{path}.{brief(next(k for k in node if not isinstance(k, str)), 40)}", "unknown key"
    return path[1:] if path else "<document>", _words(problem, node, kind), said


def _words(problem: str, value: Any, kind: Any = None) -> str:
    """msgspec's problem in plain words (``expected an integer >= 1, got 0``; a ``Literal``'s values, a pattern's
    ``Meta(description=...)``)."""
    said = [m.description for m in getattr(kind, "__metadata__", ()) if isinstance(m, Meta) and m.description]
    m = re.fullmatch(r"Expected `([^`]*)`(.*?)(?:, got `[^`]*`)?", problem)
    if said and (" matching regex " in problem or not m):
        return f"expected {said[0]}, got {brief(value)}"
    if m:
        kinds = " or ".join(_WORDS.get(k, k) for k in m.group(1).split(" | "))
        return f"expected {kinds}{m.group(2)}, got {brief(value)}"
    if problem.startswith("Invalid enum value"):
        kinds = _strip(kind)[0]
        for member in get_args(kinds) if get_origin(kinds) in (Union, UnionType) else (kinds,):
            if get_origin(_strip(member)[0]) is Literal:
                return f"expected one of {', '.join(map(repr, get_args(_strip(member)[0])))}, got {brief(value)}"
    return problem


def _plain(value: Any, doc: Any) -> Any:
    """A converted value handed on: a record as a dict (defaults filled in, under ``keep`` the unknown keys as they
    were), a :class:`Custom` kind's value unwrapped."""
    if isinstance(value, Custom):
        return value.value
    if isinstance(value, Struct):
        kept = {} if value.__struct_config__.forbid_unknown_fields else doc
        return {**kept, **{f.encode_name: _plain(getattr(value, f.name), doc.get(f.encode_name))
                           for f in type(value).fields()}}
    if isinstance(value, list) and isinstance(doc, (list, tuple)):
        return [_plain(v, d) for v, d in zip(value, doc)]
    if isinstance(value, dict) and isinstance(doc, dict):
        return {k: _plain(v, doc.get(k)) for k, v in value.items()}
    return value


def read(rec: type[Record], doc: Any, *, file: Any, prefix: str = "", fix: str | None = None) -> Any:
    """``doc`` validated against ``rec`` as :func:`_plain` hands it on (a ``metadata`` record's as it is); ``fix``
    replaces the declared fix (a header read for a sample says what to do there)."""
    if rec.metadata:
        return doc
    judged = doc  # under keep, a key that is not a string (a torch.save dict's) is kept, never judged
    if rec.unknown == "keep" and isinstance(doc, dict) and not all(isinstance(k, str) for k in doc):
        judged = {k: v for k, v in doc.items() if isinstance(k, str)}
    try:
        return _plain(msgspec.convert(judged, rec, strict=True, dec_hook=_hook), doc)
    except msgspec.ValidationError as e:
        field, problem, said = _locate(rec, judged, str(e))
        raise InputError(file, f"{prefix}.{field}" if prefix else field, problem, fix or said) from None
    except UnicodeEncodeError:  # msgspec's message could not hold the string
        raise InputError(file, prefix or "<document>", SURROGATE, fix or rec.fix) from None


def problems(rec: type[Record], doc: Any, prefix: str = "") -> list[tuple[str, str]]:
    """``(field, problem)`` for each declared field of ``doc`` that ``rec`` would not take (to show metadata)."""
    if not isinstance(doc, dict):
        return [(prefix or "<document>", f"expected an object, got {brief(doc)}")]
    out = []
    for f in rec.fields():
        name = f"{prefix}.{f.encode_name}".lstrip(".")
        if f.encode_name not in doc:
            out += [(name, "missing")] if f.required else []
            continue
        try:
            msgspec.convert(doc[f.encode_name], f.type, strict=True, dec_hook=_hook)
        except msgspec.ValidationError as e:
            field, problem, _ = _locate(rec, doc, f"{e} - at `$.{f.encode_name}`")
            out.append((f"{prefix}.{field}".lstrip("."), problem))
        except UnicodeEncodeError:
            out.append((name, SURROGATE))
    return out
