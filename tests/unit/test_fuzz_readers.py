"""Property-based fuzzing of every reader of user files, through the command line (``cli.main``, in-process).

Each test mutates one valid file (tests/support/hostile_inputs.py: a value swapped for any JSON value, a key deleted
or added, then truncation, a duplicate key, non-UTF-8 bytes, a byte-order mark, deep nesting, NaN, a 5000-digit
integer; tensors of other dtypes and shapes; bytes cut or flipped) and runs the command that reads it. The property:
the command ends with a verdict (0, 1, 3) or refuses the input with exit 2 in one line naming the file and ``fix:``;
never a traceback or an internal error (70), never a terminal escape, always within a time bound.

The example budget is fixed and the runs are derandomized (support.hostile_inputs.fuzz_settings), so CI runs the
same cases every time; E3C_FUZZ_SCALE=10 runs ten times as many. Special files (fifos, directories, symlink loops,
unreadable files) are in test_fuzz_special_files.py; the audit's catalog of causes in test_fuzz_catalog.py.
"""

import gzip
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import save_file

from support.hostile_inputs import (
    M,
    compare,
    convert,
    fuzz_settings,
    inspect,
    json_values,
    mutated_json,
    problems,
    run_cli,
    shared_base,
    show,
    st_read,
    verify,
    write,
)

pytestmark = pytest.mark.fuzz  # make quick leaves it out; make test runs it

MAX_SECS = 15.0  # per command: the inputs are small, so anything slower is a hang or a quadratic trap
ANY = (0, 1, 2, 3)


@pytest.fixture(scope="module")
def base() -> Path:
    return shared_base()


class Case:
    """A fresh directory per example (hypothesis reuses a test's fixtures across examples)."""

    def __init__(self, base: Path):
        self.base = base
        self.d = Path(tempfile.mkdtemp(prefix="e3c-fuzz-case-"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.d, ignore_errors=True)

    def link_tree(self, name: str, as_: str) -> Path:
        """A copy of a base directory whose files are hard links (cheap; a command replaces files, never edits)."""
        dst = self.d / as_
        shutil.copytree(self.base / name, dst, copy_function=os.link)
        return dst


def check(r, *, expect=ANY, names: str | None = None, case: Case | None = None) -> None:
    found = problems(r, expect=expect, names=names, max_secs=MAX_SECS)
    if r.rc == 2 and case is not None and names is None and str(case.d) not in r.err and "--" not in r.err:
        found.append(f"names no file of the case: {r.err[:300]!r}")
    assert not found, "; ".join(found)


def _replace(p: Path, data: bytes) -> Path:
    if p.exists() or p.is_symlink():
        p.unlink()  # a hard link to the base: replace it, never write through it
    p.write_bytes(data)
    return p


# --- JSON documents -------------------------------------------------------------------------------------------------

MANIFEST = json.loads((Path(__file__).resolve().parents[2] / "fixtures/tiny/draft" / M).read_text())
DRAFT_CONFIG = json.loads((Path(__file__).resolve().parents[2] / "fixtures/tiny/draft/config.json").read_text())
TARGET_CONFIG = json.loads((Path(__file__).resolve().parents[2] / "fixtures/tiny/target/config.json").read_text())
KIMI_TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
               "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
                               "num_hidden_layers": 7, "hidden_size": 96, "vocab_size": 256}}
SGLANG_DRAFT = {**DRAFT_CONFIG, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2],
                                                 "use_aux_hidden_state": True}}


@fuzz_settings(120)
@given(data=mutated_json(MANIFEST))
def test_manifest(base, data):
    with Case(base) as c:
        draft = c.link_tree("tiny/draft", "draft")
        _replace(draft / M, data)
        check(run_cli(show(draft)), expect=(0, 2), names=M)
        check(run_cli(inspect(draft)), names=None, case=c)


@fuzz_settings(90)
@given(doc=st.sampled_from([DRAFT_CONFIG, SGLANG_DRAFT]).flatmap(mutated_json), command=st.sampled_from(["inspect",
                                                                                                          "verify"]))
def test_draft_config(base, doc, command):
    """The draft's config.json (its eagle_config too), read by inspect (stock wirings) and verify (the model)."""
    with Case(base) as c:
        draft = c.link_tree("tiny/draft", "draft")
        _replace(draft / "config.json", doc)
        if command == "inspect":
            r = run_cli(inspect(draft, base / "tiny/target"))
        else:
            r = run_cli(verify(draft, base / "tiny/samples/data_0.pt"))
        check(r, case=c)


@fuzz_settings(90)
@given(doc=st.sampled_from([TARGET_CONFIG, KIMI_TARGET]).flatmap(mutated_json), command=st.sampled_from(["write",
                                                                                                         "inspect"]))
def test_target_config(base, doc, command):
    """The target's config.json, plain or a text_config wrapper (Kimi-K2.5)."""
    with Case(base) as c:
        draft = c.link_tree("tiny/draft", "draft")
        target = _replace(c.d / "t.json", doc)
        r = run_cli(write(draft, target) if command == "write" else inspect(draft, target))
        check(r, names="t.json" if command == "write" else None, case=c)


# --- safetensors headers and shard indexes -------------------------------------------------------------------------


def _header_case(base: Path):
    header, data = st_read(base / "tiny/draft/model.safetensors")
    return header, data


@fuzz_settings(90)
@given(hdr=st.data(), length=st.sampled_from(["right", "right", "right", "zero", "huge", "short", "long"]),
       cut=st.sampled_from([0, 0, 0, 1, 100, 4096]), command=st.sampled_from(["write", "verify"]))
def test_safetensors_header(base, hdr, length, cut, command):
    header, data = _header_case(base)
    raw = hdr.draw(mutated_json(header))
    raw += b" " * (-len(raw) % 8)
    n = {"right": len(raw), "zero": 0, "huge": 2**63, "short": max(0, len(raw) - 8), "long": len(raw) + 8}[length]
    blob = struct.pack("<Q", n) + raw + data
    with Case(base) as c:
        draft = c.link_tree("tiny/draft", "draft")
        _replace(draft / "model.safetensors", blob[:len(blob) - cut])
        r = run_cli(write(draft, base / "tiny/target") if command == "write" else
                    verify(draft, base / "tiny/samples/data_0.pt"))
        check(r, names="model.safetensors" if command == "write" else None, case=c)


SHARD_VALUES = ["model.safetensors"] * 6 + ["../other/model.safetensors", "/etc/passwd", "sub/model.safetensors",
                                            "", ".", "..", "missing.safetensors", 5, None, ["model.safetensors"]]


@fuzz_settings(60)
@given(values=st.data())
def test_shard_index(base, values):
    header, _ = _header_case(base)
    names = [n for n in header if n != "__metadata__"]
    weight_map = {n: values.draw(st.sampled_from(SHARD_VALUES)) for n in names}
    doc = values.draw(mutated_json({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    with Case(base) as c:
        draft = c.link_tree("tiny/draft", "draft")
        (c.d / "other").mkdir()
        os.link(base / "tiny/draft/model.safetensors", c.d / "other/model.safetensors")
        _replace(draft / "model.safetensors.index.json", doc)
        check(run_cli(write(draft, base / "tiny/target")), expect=(0, 2), case=c)


# --- training samples ----------------------------------------------------------------------------------------------

SEQ, H = 40, 96
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool, torch.uint8]


def tensors():
    """Small tensors of any dtype and shape, sometimes filled with NaN, Inf or out-of-vocabulary ids."""
    shapes = st.lists(st.sampled_from([0, 1, 2, 3, SEQ - 1, SEQ, SEQ + 1, 64, H]), min_size=0, max_size=3)

    def make(dtype, shape, fill):
        t = torch.zeros(shape, dtype=dtype) if dtype == torch.bool else torch.ones(shape).to(dtype)
        if fill is not None and t.numel() and dtype != torch.bool:
            t = torch.full(shape, fill).to(dtype) if t.is_floating_point() or fill >= 0 else t - 1000
        return t
    fills = st.sampled_from([None, None, float("nan"), float("inf"), 100000, -7, 3])
    return st.builds(make, st.sampled_from(DTYPES), shapes, fills)


def values():
    return st.one_of(tensors(), st.lists(tensors(), max_size=5), json_values(4),
                     st.dictionaries(st.sampled_from(["a", "input_ids"]), tensors(), max_size=2))


@fuzz_settings(70)
@given(change=st.dictionaries(st.sampled_from(["input_ids", "hidden_states", "loss_mask", "extra"]),
                              st.one_of(values(), st.just("<delete>")), min_size=1, max_size=2),
       with_config=st.booleans())
def test_legacy_sample(base, change, with_config):
    sample = torch.load(base / "tiny/samples/data_0.pt", weights_only=True)
    for key, value in change.items():
        if value == "<delete>":
            sample.pop(key, None)
        else:
            sample[key] = value
    with Case(base) as c:
        data = c.d / "samples"
        data.mkdir()
        torch.save(sample, data / "data_0.pt")
        if with_config:
            shutil.copy(base / "tiny/samples/data_config.json", data)
        check(run_cli(verify(base / "tiny/draft", data)), case=c)


@fuzz_settings(60)
@given(which=st.sampled_from(["sample_lengths.json", "data_config.json"]), mutation=st.data())
def test_sample_directory_json(base, which, mutation):
    doc = mutation.draw(mutated_json(json.loads((base / "tiny/samples" / which).read_text())))
    with Case(base) as c:
        data = c.d / "samples"
        data.mkdir()
        for n in ("data_0.pt", "data_1.pt", "sample_lengths.json", "data_config.json"):
            os.link(base / "tiny/samples" / n, data / n)
        _replace(data / which, doc)
        check(run_cli(verify(base / "tiny/draft", data)), case=c)


def _bytes_mutation():
    return st.tuples(st.sampled_from(["cut", "flip", "cut", "none"]), st.integers(0, 10**6), st.integers(1, 255))


def _mutate_bytes(data: bytes, how) -> bytes:
    kind, at, x = how
    at = at % max(1, len(data))
    if kind == "cut":
        return data[:at]
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ x]) + data[at + 1:]
    return data


@fuzz_settings(60)
@given(layout=st.sampled_from(["hs", "ckgz", "ck"]), how=_bytes_mutation(), tensor=st.one_of(st.none(), tensors()),
       key=st.sampled_from(["hidden_states", "token_ids", "input_ids", "loss_mask", "hidden_state",
                            "aux_hidden_state"]))
def test_other_sample_layouts(base, layout, how, tensor, key):
    """speculators' hs_*.safetensors and SpecForge's .ckpt / .ckpt.gz: a tensor swapped, then bytes cut or flipped."""
    name = {"hs": "hs_0.safetensors", "ckgz": "data_0.ckpt.gz", "ck": "data_0.ckpt"}[layout]
    src = base / layout / name
    with Case(base) as c:
        data = c.d / layout
        data.mkdir()
        p = data / name
        if tensor is not None and layout == "hs":
            from safetensors.torch import load_file

            t = load_file(str(src))
            t[key] = tensor.contiguous()
            save_file(t, str(p))
        elif tensor is not None:
            opener = gzip.open if layout == "ckgz" else open
            with opener(src, "rb") as f:
                d = torch.load(f, weights_only=True)
            d[key] = tensor
            with opener(p, "wb") as f:
                torch.save(d, f)
        else:
            shutil.copy(src, p)
        p.write_bytes(_mutate_bytes(p.read_bytes(), how))
        check(run_cli(verify(base / "tiny/draft", data)), case=c)


# --- the capture dump ------------------------------------------------------------------------------------------------


@fuzz_settings(60)
@given(part=st.sampled_from(["metadata", "tensors", "bytes"]), mutation=st.data())
def test_dump(base, part, mutation):
    from safetensors.torch import load_file

    with Case(base) as c:
        dump = c.d / "dump"
        shutil.copytree(base / "dump", dump)
        batch = sorted(dump.glob("*.safetensors"))[0]
        if part == "metadata":
            meta = batch.with_suffix(".json")
            _replace(meta, mutation.draw(mutated_json(json.loads(meta.read_text()))))
        elif part == "tensors":
            t = load_file(str(batch))
            key = mutation.draw(st.sampled_from(["aux_hidden_states", "positions", "input_ids"]))
            new = mutation.draw(st.one_of(st.none(), tensors()))
            if new is None:
                t.pop(key)
            else:
                t[key] = new.contiguous()
            save_file(t, str(batch))
        else:
            batch.write_bytes(_mutate_bytes(batch.read_bytes(), mutation.draw(_bytes_mutation())))
        check(run_cli(compare(dump, base / "tiny/samples")), expect=(0, 1, 2), case=c)


# --- convert: a speculators config (and its eagle_config / transformer_layer_config) --------------------------------


@fuzz_settings(60)
@given(mutation=st.data(), which=st.sampled_from(["spec_draft", "sf_draft"]))
def test_convert_config(base, mutation, which):
    cfg = json.loads((base / which / "config.json").read_text())
    target = base / ("kimi" if which == "spec_draft" else "dsv3")
    with Case(base) as c:
        src = c.link_tree(which, "src")
        _replace(src / "config.json", mutation.draw(mutated_json(cfg)))
        dst = c.d / "out"
        r = run_cli(convert(src, dst, target))
        check(r, expect=(0, 2, 3), case=c)
        leftovers = [p.name for p in c.d.iterdir() if p.name.startswith(".sglang-eagle3-capture.")]
        assert leftovers == [], f"temporary directory left: {leftovers}"
        if r.rc != 0:
            assert not dst.exists(), "a failed convert must not leave DST"
