"""Property tests over every declared user record at once (``support.schemas.ALL``, read by the one
engine ``sglang_eagle3_capture.core.records``): a schema added to ALL is covered without a line here.

For each record: generated valid documents are accepted; one strict field given a value of a type it never takes,
or just outside its bounds, is refused with ``.field`` that field's path and ``.file`` the file given; a required
field removed is refused naming it; an unknown key is refused under ``refuse`` and kept under ``keep``; a
``metadata`` record never raises, whatever the document.

Values come from each field's kind. The engine's own kinds are generated from their parameters; a schema's subclass
of one of them (a stricter ``check``) gets the base kind's values filtered by its own ``check``; a kind of its own
(the samples' tensors) needs a generator in :data:`OWN_KINDS`, and :func:`test_every_kind_can_be_generated` names
one that has none. End-to-end cases that only a real process shows are in the other test_fuzz_*.py modules.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglang_eagle3_capture.core import records
from sglang_eagle3_capture.core.records import (
    Anything,
    Bool,
    Const,
    Float,
    Int,
    Kind,
    ListOf,
    MapOf,
    Nested,
    OneOf,
    Optional,
    Record,
    Str,
)
from support.hostile_inputs import fuzz_settings, json_values
from support.schemas import ALL

pytestmark = pytest.mark.fuzz

FILE = Path("/data/some draft/file.json")  # what every read here is told it reads
UNKNOWN = "zz_key_from_a_later_version"
EXAMPLES = 25
BASE_KINDS = (Nested, Optional, OneOf, ListOf, MapOf, Const, Bool, Int, Float, Str, Anything)


def _tensor(kind) -> st.SearchStrategy:
    """A small tensor ``samples.Tensor`` takes: one of its dims, finite floats or integers as it asks."""
    import torch

    dtypes = {"float": [torch.float32], "int": [torch.int64]}.get(kind.values, [torch.float32, torch.int64])
    return st.builds(lambda dims, dtype, side: torch.ones([side] * dims, dtype=dtype),
                     st.sampled_from(kind.dims), st.sampled_from(dtypes), st.integers(1, 3))


# Kinds a schema module defines itself (not derived from the engine's): "module.Class" -> valid-value strategy.
OWN_KINDS = {"sglang_eagle3_capture.doctor.sample_schema.Tensor": _tensor}


def _name(kind: Kind) -> str:
    return f"{type(kind).__module__}.{type(kind).__qualname__}"


def _base(kind: Kind) -> type | None:
    return next((b for b in BASE_KINDS if isinstance(kind, b)), None)


def _own_check(kind: Kind) -> bool:
    """``kind`` is a schema's subclass of an engine kind that overrides its ``check`` (a stricter rule)."""
    base = _base(kind)
    return base is not None and type(kind) is not base and type(kind).check is not base.check


# --- valid values ------------------------------------------------------------------------------------------------


def valid(kind: Kind) -> st.SearchStrategy:
    if _name(kind) in OWN_KINDS:
        return OWN_KINDS[_name(kind)](kind)
    strategy = _valid_base(kind)
    return strategy.filter(lambda v: _takes(kind, v)) if _own_check(kind) else strategy


def _takes(kind: Kind, value) -> bool:
    try:
        kind.check(value, "x")
    except records.Bad:
        return False
    return True


def _valid_base(kind: Kind) -> st.SearchStrategy:
    if isinstance(kind, Nested):
        return document(kind.record)
    if isinstance(kind, Optional):
        return st.none() | valid(kind.kind)
    if isinstance(kind, OneOf):
        return st.one_of([valid(k) for k in kind.kinds])
    if isinstance(kind, ListOf):
        return st.lists(valid(kind.item), min_size=kind.min_len, max_size=min(kind.max_len, kind.min_len + 3))
    if isinstance(kind, MapOf):
        return st.dictionaries(st.text(max_size=8), valid(kind.value), max_size=min(kind.max_len, 3))
    if isinstance(kind, Const):
        return st.just(kind.value)
    if isinstance(kind, Bool):
        return st.booleans()
    if isinstance(kind, Int):
        return st.integers(kind.lo, kind.hi)
    if isinstance(kind, Float):
        return st.floats(kind.lo, kind.hi, allow_nan=False, allow_infinity=False) | st.integers(
            None if kind.lo is None else math.ceil(kind.lo), None if kind.hi is None else math.floor(kind.hi))
    if isinstance(kind, Str):
        if kind.choices:
            return st.sampled_from(kind.choices)
        return st.text(min_size=1 if kind.nonempty else 0, max_size=min(kind.max_len, 12))
    if isinstance(kind, Anything):
        return json_values(4)
    raise LookupError(f"no generator for the kind {_name(kind)}: add one to OWN_KINDS")


def document(record: Record) -> st.SearchStrategy:
    """A document ``record`` takes: every required field, some optional ones, and (``keep``) maybe an unknown key."""
    required = {f.name: valid(f.kind) for f in record.fields if f.required}
    optional = {f.name: valid(f.kind) for f in record.fields if not f.required}
    if record.unknown == "keep":
        optional[UNKNOWN] = json_values(3)
    return st.fixed_dictionaries(required, optional=optional)


# --- wrong values: of a JSON type the kind never takes, or just outside its bounds -----------------------------------

SAMPLES = {"null": None, "bool": True, "int": 7, "float": 0.5, "str": "x", "list": [1], "object": {"k": 1}}


def _types(kind: Kind) -> set[str]:
    """The JSON types ``kind`` may take (a schema's own kind that is not JSON takes none)."""
    if isinstance(kind, Optional):
        return _types(kind.kind) | {"null"}
    if isinstance(kind, OneOf):
        return set().union(*(_types(k) for k in kind.kinds))
    if isinstance(kind, Anything):
        return set(SAMPLES)
    if isinstance(kind, Const):
        return {_type_of(kind.value)}
    return {ListOf: {"list"}, MapOf: {"object"}, Nested: {"object"}, Bool: {"bool"}, Int: {"int"},
            Float: {"int", "float"}, Str: {"str"}}.get(_base(kind), set())


def _type_of(value) -> str:
    return next(name for name, sample in SAMPLES.items() if type(sample) is type(value))


def wrong_values(kind: Kind) -> list:
    """Values ``kind`` refuses, by construction (not by asking ``kind``)."""
    out = [sample for name, sample in SAMPLES.items() if name not in _types(kind)]
    inner = kind.kind if isinstance(kind, Optional) else kind
    if isinstance(inner, Int | Float):
        out += [b for b in (None if inner.lo is None else inner.lo - 1, None if inner.hi is None else inner.hi + 1)
                if b is not None]
    elif isinstance(inner, Str):
        out += (["not one of the choices"] if inner.choices else []) + ([""] if inner.nonempty else [])
    elif isinstance(inner, Const):
        out += [inner.value + 1 if isinstance(inner.value, int) else str(inner.value) + "x"]
    elif isinstance(inner, ListOf) and inner.min_len:
        out += [[]]
    return out


def wrong_cases(path: str, kind: Kind) -> list[tuple[str, object]]:
    """``(field path the error must name, value)`` for a field at ``path``: the whole value wrong, or (a list, an
    object of values) its first item wrong."""
    out = [(path, v) for v in wrong_values(kind)]
    inner = kind.kind if isinstance(kind, Optional) else kind
    if isinstance(inner, ListOf) and inner.min_len <= 1 and _base(inner.item) is not Nested:
        out += [(f"{path}[0]", [v]) for v in wrong_values(inner.item)]
    elif isinstance(inner, MapOf) and _base(inner.value) is not Nested:
        out += [(f"{path}.k", {"k": v}) for v in wrong_values(inner.value)]
    return out


def _paths(record: Record, prefix: str = ""):
    """``(path, field, record holding it)`` for every declared field, through nested records."""
    for f in record.fields:
        path = f"{prefix}.{f.name}" if prefix else f.name
        yield path, f, record
        inner = f.kind.kind if isinstance(f.kind, Optional) else f.kind
        if isinstance(inner, Nested):
            yield from _paths(inner.record, path)


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


def _parent_records(record: Record, path: str) -> list[Record]:
    rec, out = record, [record]
    for part in path.split(".")[:-1]:
        kind = rec.field(part).kind
        rec = (kind.kind if isinstance(kind, Optional) else kind).record
        out.append(rec)
    return out


def _nested_valid(record: Record, path: str, data) -> dict:
    """A valid document of ``record`` whose records along ``path`` are all present (objects, not null)."""
    doc = data.draw(document(record))
    node, rec = doc, record
    for part in path.split(".")[:-1]:
        kind = rec.field(part).kind
        rec = (kind.kind if isinstance(kind, Optional) else kind).record
        if not isinstance(node.get(part), dict):
            node[part] = data.draw(document(rec))
        node = node[part]
    return doc


def _refused(record: Record, doc, field: str) -> None:
    with pytest.raises(record.error) as e:
        records.read(record, doc, file=FILE)
    assert (e.value.field, str(e.value.file)) == (field, str(FILE)), str(e.value)
    assert e.value.fix


JUDGED = [r for r in ALL if not r.metadata]
IDS = [f"{i}-{r.name}" for i, r in enumerate(JUDGED)]


def test_every_kind_can_be_generated():
    """Every kind in every declared record is one of the engine's, a subclass of one, or has a generator here."""
    def kinds(kind):
        yield kind
        for attr in ("kind", "item", "value"):
            if isinstance(getattr(kind, attr, None), Kind):
                yield from kinds(getattr(kind, attr))
        for k in getattr(kind, "kinds", ()):
            yield from kinds(k)
        if isinstance(kind, Nested):
            for f in kind.record.fields:
                yield from kinds(f.kind)

    missing = sorted({_name(k) for r in ALL for f in r.fields for k in kinds(f.kind)
                      if _base(k) is None and _name(k) not in OWN_KINDS})
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
    return [(path, named, value) for path, f, _ in _paths(record) for named, value in wrong_cases(path, f.kind)]


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
@pytest.mark.parametrize("doc", [[], "x", 5, None, [{}]], ids=repr)
def test_a_document_that_is_not_an_object_is_refused(record, doc):
    with pytest.raises(record.error) as e:
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
    nests = [""] + [path for path, f, _ in _paths(record)
                    if isinstance(f.kind.kind if isinstance(f.kind, Optional) else f.kind, Nested)]
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
