"""Property tests over every declared user record at once (``support.schemas.ALL``, read through msgspec by
``sglang_eagle3_capture.core.records``): a schema added to ALL is covered without a line here.

For each record: generated valid documents are accepted; one strict field given a value of a type it never takes,
or just outside its bounds, is refused with ``.field`` that field's path and ``.file`` the file given; a required
field removed is refused naming it; an unknown key is refused under ``refuse`` and kept under ``keep``; a
``metadata`` record never raises, whatever the document.

Values come from each field's type as msgspec declares it (``Annotated`` bounds, ``Literal``, unions, nested
records); a :class:`~sglang_eagle3_capture.core.records.Custom` kind (a rule of its own, a tensor) needs a generator
in :data:`OWN_KINDS`, and :func:`test_every_kind_can_be_generated` names one that has none. End-to-end cases that
only a real process shows are in the other test_fuzz_*.py modules.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_eagle3_capture.core import records
from sglang_eagle3_capture.core.config_keys import VLLM_FAIL_CLOSED_IDS
from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.records import Custom, Record
from support.hostile_inputs import fuzz_settings, json_values
from support.schemas import ALL

pytestmark = pytest.mark.fuzz

FILE = Path("/data/some draft/file.json")  # what every read here is told it reads
UNKNOWN = "zz_key_from_a_later_version"
EXAMPLES = 25


def _tensor(kind) -> st.SearchStrategy:
    """A small tensor a ``sample_schema.Tensor`` kind takes: one of its dims, finite floats or integers as it asks."""
    import torch

    dtypes = {"float": [torch.float32], "int": [torch.int64]}.get(kind.values, [torch.float32, torch.int64])
    return st.builds(lambda dims, dtype, side: torch.ones([side] * dims, dtype=dtype),
                     st.sampled_from(kind.dims), st.sampled_from(dtypes), st.integers(1, 3))


def _top_ids(kind) -> st.SearchStrategy:
    return st.lists(st.integers(), max_size=3) | st.just(list(VLLM_FAIL_CLOSED_IDS))


# Custom kinds (not msgspec's): "module.Class" of the kind or of a base -> valid-value strategy.
OWN_KINDS = {"sglang_eagle3_capture.doctor.sample_schema.Tensor": _tensor,
             "sglang_eagle3_capture.core.schemas.draft.TopIds": _top_ids,
             "sglang_eagle3_capture.core.records.Exactly": lambda kind: st.just(kind.const)}


def _own(kind) -> Any:
    return next((OWN_KINDS[n] for c in kind.__mro__ if (n := f"{c.__module__}.{c.__qualname__}") in OWN_KINDS), None)


def _meta(kind) -> tuple[Any, dict]:
    """``kind`` without ``Annotated``, and the constraints its ``Meta`` layers set."""
    bounds: dict = {}
    while get_origin(kind) is Annotated:
        for m in kind.__metadata__:
            if isinstance(m, msgspec.Meta):
                bounds.update({k: getattr(m, k) for k in ("ge", "gt", "le", "lt", "min_length", "max_length",
                                                          "pattern") if getattr(m, k) is not None})
        kind = get_args(kind)[0]
    return kind, bounds


def _members(kind) -> tuple:
    return get_args(kind) if get_origin(kind) in (Union, UnionType) else (kind,)


def _is_record(kind) -> bool:
    return isinstance(kind, type) and issubclass(kind, Record)


def _is_custom(kind) -> bool:
    return isinstance(kind, type) and issubclass(kind, Custom)


def _inner(kind):
    """The record a field holds, if any (``X | None`` included)."""
    return next((m for m in _members(_meta(kind)[0]) if _is_record(_meta(m)[0])), None)


# --- valid values ------------------------------------------------------------------------------------------------


def valid(kind) -> st.SearchStrategy:
    kind, b = _meta(kind)
    members = _members(kind)
    if len(members) > 1:
        return st.one_of([valid(m) for m in members])
    origin = get_origin(kind)
    if _is_record(kind):
        return document(kind)
    if _is_custom(kind):
        if _own(kind) is None:
            raise LookupError(f"no generator for the kind {kind.__qualname__}: add one to OWN_KINDS")
        return _own(kind)(kind)
    if kind is Any:
        return json_values(4)
    if kind is NoneType or kind is None:
        return st.none()
    if origin is Literal:
        return st.sampled_from(get_args(kind))
    if origin is list:
        lo = b.get("min_length", 0)
        return st.lists(valid(get_args(kind)[0]), min_size=lo, max_size=min(b.get("max_length", lo + 3), lo + 3))
    if origin is dict:
        return st.dictionaries(st.text(max_size=8), valid(get_args(kind)[1]), max_size=min(b.get("max_length", 3), 3))
    if kind is bool:
        return st.booleans()
    if kind is int:
        return st.integers(b.get("ge"), b.get("le"))
    if kind is float:
        lo, hi = b.get("ge", b.get("gt")), b.get("le")
        floats = st.floats(lo, hi, allow_nan=False, allow_infinity=False, exclude_min="gt" in b)
        ints = st.integers(None if lo is None else math.floor(lo) + ("gt" in b or lo != math.floor(lo)),
                           None if hi is None or hi > sys.maxsize else math.floor(hi))
        return floats | ints
    if kind is str:
        text = st.text(min_size=b.get("min_length", 0), max_size=min(b.get("max_length", 12), 12))
        return text.filter(lambda v: re.search(b["pattern"], v)) if "pattern" in b else text
    raise LookupError(f"no generator for the type {kind!r}")


def document(record: type[Record]) -> st.SearchStrategy:
    """A document ``record`` takes: every required field, some optional ones, and (``keep``) maybe an unknown key."""
    required = {f.encode_name: valid(f.type) for f in record.fields() if f.required}
    optional = {f.encode_name: valid(f.type) for f in record.fields() if not f.required}
    if record.unknown == "keep":
        optional[UNKNOWN] = json_values(3)
    return st.fixed_dictionaries(required, optional=optional)


# --- wrong values: of a JSON type the kind never takes, or just outside its bounds -----------------------------------

SAMPLES = {"null": None, "bool": True, "int": 7, "float": 0.5, "str": "x", "list": [1], "object": {"k": 1}}


def _types(kind) -> set[str]:
    """The JSON types ``kind`` may take (a custom kind says which: a tensor takes none)."""
    kind, _ = _meta(kind)
    if len(_members(kind)) > 1:
        return set().union(*(_types(m) for m in _members(kind)))
    if kind is Any:
        return set(SAMPLES)
    if _is_custom(kind):
        return set(kind.takes)
    if get_origin(kind) is Literal:
        return {_type_of(v) for v in get_args(kind)}
    if _is_record(kind):
        return {"object"}
    return {list: {"list"}, dict: {"object"}, bool: {"bool"}, int: {"int"}, float: {"int", "float"}, str: {"str"},
            NoneType: {"null"}, None: {"null"}}.get(get_origin(kind) or kind, set())


def _type_of(value) -> str:
    return next(name for name, sample in SAMPLES.items() if type(sample) is type(value))


def _single(kind):
    """``kind`` without ``| None``: (the one other member, its bounds), or None where there are several."""
    kind, b = _meta(kind)
    members = [m for m in _members(kind) if m not in (None, NoneType)]
    if len(members) != 1:
        return None, {}
    return _meta(members[0]) if members[0] is not kind else (kind, b)


def wrong_values(kind) -> list:
    """Values ``kind`` refuses, by construction (not by asking ``kind``)."""
    out = [sample for name, sample in SAMPLES.items() if name not in _types(kind)]
    inner, b = _single(kind)
    if inner in (int, float):
        low = b.get("ge", b.get("gt"))
        out += [v for v in (None if low is None else low - 1, None if b.get("le") is None else b["le"] + 1)
                if v is not None and not (inner is float and abs(v) >= sys.float_info.max)]
        if inner is float:
            out += [math.nan, math.inf]
    elif inner is str:
        out += [""] if b.get("min_length") else []
    elif get_origin(inner) is Literal:
        values = get_args(inner)
        out += [max(v for v in values if type(v) is int) + 1] if any(type(v) is int for v in values) else []
        out += [max(v for v in values if type(v) is str) + "x"] if any(type(v) is str for v in values) else []
    elif get_origin(inner) is list and b.get("min_length"):
        out += [[]]
    return out


def wrong_cases(path: str, kind) -> list[tuple[str, object]]:
    """``(field path the error must name, value)`` for a field at ``path``: the whole value wrong, or (a list, an
    object of values) its first item wrong."""
    out = [(path, v) for v in wrong_values(kind)]
    inner, b = _single(kind)
    origin = get_origin(inner)
    if origin is list and b.get("min_length", 0) <= 1 and _inner(get_args(inner)[0]) is None:
        out += [(f"{path}[0]", [v]) for v in wrong_values(get_args(inner)[0])]
    elif origin is dict and _inner(get_args(inner)[1]) is None:
        out += [(f"{path}.k", {"k": v}) for v in wrong_values(get_args(inner)[1])]
    return out


def _paths(record: type[Record], prefix: str = ""):
    """``(path, field type, record holding it)`` for every declared field, through nested records."""
    for f in record.fields():
        path = f"{prefix}.{f.encode_name}" if prefix else f.encode_name
        yield path, f, record
        if _inner(f.type) is not None:
            yield from _paths(_meta(_inner(f.type))[0], path)


def _field(record: type[Record], name: str):
    return next(f for f in record.fields() if f.encode_name == name)


def _set(doc: dict, path: str, value) -> dict:
    """``doc`` with ``path`` (dotted, through nested records) set to ``value``, its parents present."""
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[last] = value
    return doc


def _parent_records(record: type[Record], path: str) -> list[type[Record]]:
    rec, out = record, [record]
    for part in path.split(".")[:-1]:
        rec = _meta(_inner(_field(rec, part).type))[0]
        out.append(rec)
    return out


def _nested_valid(record: type[Record], path: str, data) -> dict:
    """A valid document of ``record`` whose records along ``path`` are all present (objects, not null)."""
    doc = data.draw(document(record))
    node, rec = doc, record
    for part in path.split(".")[:-1]:
        rec = _meta(_inner(_field(rec, part).type))[0]
        if not isinstance(node.get(part), dict):
            node[part] = data.draw(document(rec))
        node = node[part]
    return doc


def _refused(record: type[Record], doc, field: str) -> None:
    with pytest.raises(InputError) as e:
        records.read(record, doc, file=FILE)
    assert (e.value.field, str(e.value.file)) == (field, str(FILE)), str(e.value)
    assert e.value.fix


JUDGED = [r for r in ALL if not r.metadata]
IDS = [f"{i}-{r.name}" for i, r in enumerate(JUDGED)]


def test_every_kind_can_be_generated():
    """Every type in every declared record is msgspec's own, a record, or a custom kind with a generator here."""
    def kinds(kind):
        kind, _ = _meta(kind)
        yield kind
        for arg in get_args(kind) if get_origin(kind) is not Literal else ():
            yield from kinds(arg)
        if _is_record(kind):
            for f in kind.fields():
                yield from kinds(f.type)

    missing = sorted({k.__qualname__ for r in ALL for f in r.fields() for k in kinds(f.type)
                      if _is_custom(k) and _own(k) is None})
    assert missing == [], f"kinds without a generator: {missing}; add each to OWN_KINDS"


@pytest.mark.parametrize("record", JUDGED, ids=IDS)
@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_valid_documents_are_accepted(record, data):
    doc = data.draw(document(record))
    out = records.read(record, doc, file=FILE)
    assert set(record.names) <= set(out)
    if record.unknown == "keep" and UNKNOWN in doc:
        assert out[UNKNOWN] == doc[UNKNOWN]


def _wrong_cases(record) -> list:
    return [(path, named, value) for path, f, _ in _paths(record) for named, value in wrong_cases(path, f.type)]


def _required(record) -> list[str]:
    return [path for path, f, _ in _paths(record) if f.required]


# A record with no field a value could be wrong for, or no required field, has nothing to refuse: it is not a case.
WITH_WRONG = [r for r in JUDGED if _wrong_cases(r)]
WITH_REQUIRED = [r for r in JUDGED if _required(r)]


@pytest.mark.parametrize("record", WITH_WRONG, ids=[r.name for r in WITH_WRONG])
@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_a_wrong_value_is_refused_naming_its_field(record, data):
    cases = _wrong_cases(record)
    path, named, value = data.draw(st.sampled_from(cases), label="field, named, value")
    _refused(record, _set(_nested_valid(record, path, data), path, value), named)


@pytest.mark.parametrize("record", JUDGED, ids=IDS)
@pytest.mark.parametrize("doc", [[], "x", 5, None, [{}], "\ud800", {"\ud800": "\ud800"}], ids=ascii)
def test_a_document_that_is_not_an_object_is_refused(record, doc):
    """A lone surrogate included: msgspec raises UnicodeEncodeError writing its message; the reader's error stands."""
    if isinstance(doc, dict) and record.unknown == "keep" and not _required(record):
        return  # an unknown key, kept: nothing to refuse
    with pytest.raises(InputError) as e:
        records.read(record, doc, file=FILE)
    assert str(e.value.file) == str(FILE) and e.value.fix


@pytest.mark.parametrize("record", WITH_REQUIRED, ids=[r.name for r in WITH_REQUIRED])
@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_a_missing_required_field_is_refused_naming_it(record, data):
    required = _required(record)
    path = data.draw(st.sampled_from(required), label="field")
    doc = _nested_valid(record, path, data)
    node = doc
    for part in path.split(".")[:-1]:
        node = node[part]
    del node[path.split(".")[-1]]
    _refused(record, doc, path)


@pytest.mark.parametrize("record", JUDGED, ids=IDS)
@fuzz_settings(EXAMPLES)
@given(data=st.data())
def test_an_unknown_key_is_refused_or_kept_as_the_record_says(record, data):
    """At the top level and in each nested record, by that record's own policy."""
    nests = [""] + [path for path, f, _ in _paths(record) if _inner(f.type) is not None]
    where = data.draw(st.sampled_from(nests), label="record")
    key = f"{where}.{UNKNOWN}" if where else UNKNOWN
    holder = _parent_records(record, key)[-1]
    doc = _nested_valid(record, key, data)
    value = data.draw(json_values(3), label="value")
    _set(doc, key, value)
    if holder.unknown == "refuse":
        _refused(record, doc, key)
        return
    out = records.read(record, doc, file=FILE)
    for part in key.split("."):
        out = out[part]
    assert out == value


METADATA = [r for r in ALL if r.metadata]


@pytest.mark.parametrize("record", METADATA, ids=[r.name for r in METADATA])
@fuzz_settings(EXAMPLES * 2)
@given(doc=st.one_of(json_values(8), st.dictionaries(st.text(max_size=10), json_values(4), max_size=6)))
def test_a_metadata_record_never_raises(record, doc):
    assert records.read(record, doc, file=FILE) is doc
    assert all(isinstance(field, str) and problem for field, problem in records.problems(record, doc))


def test_there_is_a_metadata_record():
    """The manifest's provenance at least: the metadata property above has something to hold."""
    assert METADATA
