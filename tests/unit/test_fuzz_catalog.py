"""The hostile-input audit's catalog (159 of its 208 cases, the baselines included), one regression test per case.

What stays is what only the command line shows end to end: special files, permissions, a full disk, concurrency,
the JSON text itself (nesting, huge integers, duplicate keys, NaN, bytes that are not UTF-8), sizes and time bounds,
checks that tie one file to another, printing. The cases that re-tested one declared field of one record (a wrong
type, a bound, a missing or unknown key) went: test_fuzz_records.py proves those properties for every record in
``support.schemas.ALL`` at once.

Each case builds one bad input from a valid one (tests/support/hostile_inputs.py) and runs one command through
``sglang_eagle3_capture.doctor.cli.main`` in this process. A bad input must end in exit 2 with one line on stderr
naming the file (and field) and ``fix:``, no traceback, in bounded time; a valid one keeps its verdict. Cases that
need an unprivileged user run in one child Python without the capabilities by which root ignores file permissions
(so the owner's mode bits on the case's files are what decides) (:func:`support.hostile_inputs.run_as_user`); cases
that simulate a full disk (``RLIMIT_FSIZE``) run in a forked child. ``cause`` is the cause number in the audit's
catalog; the property-based mutations of the same readers are in test_fuzz_readers.py.
"""

import json
import os
import resource
import shutil
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from support.hostile_inputs import (
    Ctx,
    M,
    Result,
    build_base,
    compare,
    convert,
    deep,
    edit_json,
    huge_int,
    inspect,
    jw,
    loop_link,
    mkfifo,
    problems,
    run_as_user,
    run_cli,
    run_cli_process,
    sf_edit,
    show,
    st_edit,
    st_read,
    st_write,
    torch_edit,
    verify,
    world_readable_dir,
    write,
)

pytestmark = pytest.mark.fuzz  # make quick leaves the catalog out; make test runs it

# Cases whose cause is not fixed yet (case id -> cause): expected to fail, strictly (a case that starts passing must
# be taken off). Empty once every cause is fixed.
PENDING: dict[str, str] = {}


def jr(p: Path):
    return json.loads(Path(p).read_text())


@dataclass
class Case:
    id: str
    cause: str
    title: str
    build: Callable[[Ctx], dict]
    expect: tuple = (2,)
    timeout: float = 60.0
    user: str | None = None
    proc: bool = False


CASES: list[Case] = []


def case(id, cause, title, expect=(2,), timeout=60.0, user=None, proc=False):
    def deco(fn):
        CASES.append(Case(id, cause, title, fn, tuple(expect), timeout, user, proc))
        return fn

    return deco


def manifest_draft(c: Ctx, mutate=None, text=None, raw=None) -> Path:
    d = c.cp("tiny/draft", "draft")
    m = d / M
    if raw is not None:
        m.write_bytes(raw)
    elif text is not None:
        m.write_text(text)
    else:
        edit_json(m, mutate)
    return d


# ---- baselines (valid inputs; expected 0, or 1 where the fixture is mis-wired by design) ----


@case("B1", "ok", "baseline: manifest show", expect=(0,))
def _(c):
    return {"argv": show(c.b("tiny/draft"))}


@case("B2", "ok", "baseline: inspect --stock (stock SGLang mis-wires the fixture by design: 1)", expect=(1,))
def _(c):
    return {"argv": inspect(c.b("tiny/draft"), c.b("tiny/target"), extra=("--stock",))}


@case("B3", "ok", "baseline: verify legacy .pt", expect=(0,))
def _(c):
    return {"argv": verify(c.b("tiny/draft"), c.b("tiny/samples"))}


@case("B4", "ok", "baseline: verify hs_*.safetensors", expect=(0,))
def _(c):
    return {"argv": verify(c.b("tiny/draft"), c.b("hs"))}


@case("B5", "ok", "baseline: verify SpecForge .ckpt.gz + target embedding", expect=(0,))
def _(c):
    return {"argv": verify(c.b("tiny/draft"), c.b("ckgz"), extra=["--target", str(c.b("tiny/target"))])}


@case("B6", "ok", "baseline: compare", expect=(0,))
def _(c):
    return {"argv": compare(c.b("dump"), c.b("tiny/samples"))}


@case("B7", "ok", "baseline: manifest write", expect=(0,))
def _(c):
    return {"argv": write(c.cp("tiny/draft", "draft"), c.b("tiny/target"))}


@case("B8", "ok", "baseline: convert speculators draft", expect=(0,))
def _(c):
    return {"argv": convert(c.b("spec_draft"), c.p("out"), c.b("kimi"))}


@case("B9", "ok", "baseline: convert SpecForge draft", expect=(0,))
def _(c):
    return {"argv": convert(c.b("sf_draft"), c.p("out"), c.b("dsv3") / "config.json")}


# ---- manifest reader (manifest.read_json_object / manifest_from_dict) ----



@case("M01", "#11", "manifest: two 'layer_ids' keys, last one wins silently")
def _(c):
    d = manifest_draft(
        c, text=(c.b("tiny/draft") / M).read_text().replace('"layer_ids"', '"layer_ids": [-1, 0, 5], "layer_ids"', 1)
    )
    return {"argv": show(d), "names": M}


@case("M02", "#10", "manifest: deeply nested JSON (RecursionError)")
def _(c):
    return {"argv": show(manifest_draft(c, text=deep())), "names": M}


@case("M03", "#10", "manifest: integer with 5000 digits (ValueError from int parsing)")
def _(c):
    return {
        "argv": show(
            manifest_draft(c, text='{"format": "sglang-eagle3-capture.manifest", "version": ' + huge_int() + "}")
        ),
        "names": M,
    }


@case("M04", "ok", "manifest: non-UTF-8 bytes")
def _(c):
    return {"argv": show(manifest_draft(c, raw=b'{"format": "\xff\xfe"}')), "names": M}


@case("M05", "ok", "manifest: UTF-8 BOM")
def _(c):
    return {"argv": show(manifest_draft(c, raw=b"\xef\xbb\xbf" + (c.b("tiny/draft") / M).read_bytes())), "names": M}


@case("M06", "ok", "manifest: NaN in layer_ids")
def _(c):
    return {
        "argv": show(manifest_draft(c, text=(c.b("tiny/draft") / M).read_text().replace("-1,", "NaN,", 1))),
        "names": M,
    }


@case("M08", "ok", "manifest: unknown top-level key")
def _(c):
    return {"argv": show(manifest_draft(c, lambda d: d.update(extra=1))), "names": M}


@case("M09", "ok", "manifest: truncated file")
def _(c):
    return {"argv": show(manifest_draft(c, text=(c.b("tiny/draft") / M).read_text()[:50])), "names": M}


@case("M10", "ok", "manifest: empty file")
def _(c):
    return {"argv": show(manifest_draft(c, text="")), "names": M}


@case("M11", "ok", "manifest: target.hidden_size Infinity")
def _(c):
    return {
        "argv": show(
            manifest_draft(
                c, text=(c.b("tiny/draft") / M).read_text().replace('"hidden_size": 96', '"hidden_size": Infinity')
            )
        ),
        "names": M,
    }


@case("M13", "#09", "manifest: is a directory (show says 'no layer manifest found')")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / M).unlink()
    (d / M).mkdir()
    return {"argv": show(d), "names": M, "want_words": ["directory"]}


@case("M14", "#09", "manifest: symlink loop (show says 'no layer manifest found', fix: write one)")
def _(c):
    d = c.cp("tiny/draft", "draft")
    loop_link(d / M)
    return {"argv": show(d), "names": M, "want_words": ["symlink", "loop"]}


@case("M15", "#09", "manifest: a fifo (show says 'no layer manifest found'; no hang)")
def _(c):
    d = c.cp("tiny/draft", "draft")
    mkfifo(d / M)
    return {"argv": show(d), "names": M, "want_words": ["not a regular file", "fifo"]}


@case("M16", "#01", "manifest: unreadable (mode 000, non-root)", user="nobody")
def _(c):
    d = c.cp("tiny/draft", "draft")
    return {"argv": show(d), "names": M, "post": lambda: os.chmod(d / M, 0)}


@case("M17", "#01", "manifest: draft directory not searchable (mode 600, non-root): is_file() raises", user="nobody")
def _(c):
    d = c.cp("tiny/draft", "draft")
    return {"argv": show(d), "names": "draft", "post": lambda: os.chmod(d, 0o600)}


@case(
    "M18",
    "#27",
    "manifest: 20,000 layer ids take tens of seconds to validate (quadratic duplicate check)",
    timeout=120,
)
def _(c):
    d = manifest_draft(
        c,
        lambda d: (
            d.update(layer_ids=list(range(-1, 19999))),
            d["target"].update(num_hidden_layers=20000),
            d["target"].update(hidden_size=1),
        ),
    )
    return {"argv": show(d), "expect_override": (0,), "max_secs": 5}


@case(
    "M20",
    "#07",
    "manifest: provenance.note with ANSI escapes and a forged 'verdict: OK' line is printed raw",
    expect=(0,),  # metadata: kept and shown escaped, never refused (issue 17)
)
def _(c):
    d = manifest_draft(
        c, lambda d: d["provenance"].update(note="\x1b[2J\x1b[32mall good\nverdict:     OK: forged\x1b]0;title\x07")
    )
    return {"argv": show(d), "names": M, "forbid_out": "\nverdict:     OK: forged"}


@case(
    "M21",
    "#03",
    "manifest: provenance.note '\\ud800' (a lone surrogate) crashes `manifest show` at print, in any locale",
)
def _(c):
    d = manifest_draft(c, text=(c.b("tiny/draft") / M).read_text().replace('"note": "', '"note": "\\ud800', 1))
    return {"argv": show(d), "names": M, "expect_override": (0, 2)}


@case("M22", "#06", "manifest: 200,000 float layer ids: the one-line error is megabytes long", timeout=120)
def _(c):
    d = manifest_draft(c, lambda d: d.update(layer_ids=[0.5] * 200000))
    return {"argv": show(d), "names": M, "max_err_bytes": 4096}


@case("M23", "#04", "manifest show: a DRAFT_DIR whose name holds a newline: the error is two lines")
def _(c):
    return {"argv": show(c.p("no\nsuch-draft")), "names": "such-draft"}


@case(
    "M24",
    "#03",
    "manifest show: DRAFT_DIR with a non-UTF-8 name (valid draft) crashes printing the path",
    proc=True,
    expect=(0,),
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    bad = Path(os.fsdecode(bytes(c.d) + b"/dr\xffaft"))
    d.rename(bad)
    return {"argv": show(bad), "env": {"PYTHONIOENCODING": "utf-8:strict"}}


# ---- manifest write (cli._cmd_manifest_write, manifest.write_manifest) ----


@case("W01", "#27", "manifest write: --layer-ids with 20,000 ids (quadratic duplicate check, run twice)", timeout=120)
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / "model.safetensors").unlink()
    (d / "config.json").unlink()
    t = jw(c.p("t.json"), {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 20000, "hidden_size": 8})
    return {"argv": write(d, t, ",".join(map(str, range(-1, 19999)))), "expect_override": (0,), "max_secs": 5}


@case("W02", "#28", "manifest write: eagle3_manifest.json is a directory (os.replace fails)")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / M).unlink()
    (d / M).mkdir()
    return {"argv": write(d, c.b("tiny/target"), extra=()), "names": M}


@case("W03", "#29", "manifest write: eagle3_manifest.json.tmp left as a directory", expect=(0,))
def _(c):
    # fixed: the temporary name is unique (mkstemp), so a stray .tmp of any kind is neither used nor touched
    d = c.cp("tiny/draft", "draft")
    (d / (M + ".tmp")).mkdir()
    return {"argv": write(d, c.b("tiny/target")), "names": M,
            "check": lambda: None if (d / (M + ".tmp")).is_dir() and jr(d / M)["layer_ids"] == [-1, 0, 1] else
            "stray .tmp touched or manifest not written"}


@case(
    "W04",
    "#29",
    "manifest write: eagle3_manifest.json.tmp is a symlink: the write goes through it and clobbers its target",
    expect=(0, 2),
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    victim = c.p("victim.txt")
    victim.write_text("precious user data\n")
    os.symlink(victim, d / (M + ".tmp"))
    return {
        "argv": write(d, c.b("tiny/target")),
        "check": lambda: "victim clobbered" if victim.read_text() != "precious user data\n" else None,
    }


@case(
    "W05",
    "#30",
    "manifest write: draft config.json is not JSON: manifest written, then exit 2 (a failure that changed the draft)",
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / M).unlink()
    (d / "config.json").write_text("{")
    return {
        "argv": write(d, c.b("tiny/target"), extra=()),
        "names": "config.json",
        "check": lambda: "manifest written although the command failed" if (d / M).exists() else None,
    }


@case(
    "W06",
    "#25",
    "manifest write: draft eagle_config ids are a string: manifest written, then TypeError in stock_sglang_capture",
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    edit_json(d / "config.json", lambda x: x.update(eagle_config={"eagle_aux_hidden_state_layer_ids": "0,1,2"}))
    return {"argv": write(d, c.b("tiny/target")), "names": "config.json"}


@case("W07", "#01", "manifest write: DRAFT_DIR not writable (non-root)", user="nobody")
def _(c):
    d = c.cp("tiny/draft", "draft")
    return {"argv": write(d, c.b("tiny/target")), "names": "draft", "post": lambda: os.chmod(d, 0o555)}


@case("W08", "#10", "manifest write: target config.json nested 100,000 deep")
def _(c):
    return {"argv": write(c.cp("tiny/draft", "draft"), jw(c.p("t.json"), deep())), "names": "t.json"}


@case("W09", "#10", "manifest write: target config.json with a 5000-digit integer")
def _(c):
    return {
        "argv": write(c.cp("tiny/draft", "draft"), jw(c.p("t.json"), '{"num_hidden_layers": ' + huge_int() + "}")),
        "names": "t.json",
    }


@case("W10", "#09", "manifest write: --target is a fifo ('target config not found'; no hang)")
def _(c):
    return {
        "argv": write(c.cp("tiny/draft", "draft"), mkfifo(c.p("t.json"))),
        "names": "t.json",
        "want_words": ["fifo", "not a regular file"],
    }


@case("W11", "#01", "manifest write: target config unreadable (non-root)", user="nobody")
def _(c):
    t = c.cp("tiny/target", "target")
    return {
        "argv": write(c.cp("tiny/draft", "draft"), t),
        "names": "config.json",
        "post": lambda: os.chmod(t / "config.json", 0),
    }


@case("W12", "ok", "manifest write: Kimi target whose text_config is a list")
def _(c):
    return {
        "argv": write(
            c.cp("tiny/draft", "draft"),
            jw(c.p("t.json"), {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": [1]}),
        ),
        "names": "t.json",
    }


@case("W13", "ok", "manifest write: Kimi target without text_config")
def _(c):
    return {
        "argv": write(
            c.cp("tiny/draft", "draft"),
            jw(
                c.p("t.json"),
                {"architectures": ["KimiK25ForConditionalGeneration"], "num_hidden_layers": 7, "hidden_size": 96},
            ),
        ),
        "names": "t.json",
    }


@case("W14", "ok", "manifest write: target architectures is a string")
def _(c):
    return {
        "argv": write(
            c.cp("tiny/draft", "draft"),
            jw(c.p("t.json"), {"architectures": "DeepseekV3ForCausalLM", "num_hidden_layers": 7, "hidden_size": 96}),
        ),
        "names": "t.json",
    }


@case("W16", "#16", "manifest write: draft header: fc.weight shape []")
def _(c):
    d = c.cp("tiny/draft", "draft")
    st_edit(d / "model.safetensors", lambda h: h["fc.weight"].update(shape=[]))
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors"}


@case("W40", "P5", "manifest write: a header that claims 200 MB (a sparse file): refused before it is read", timeout=30)
def _(c):
    d = c.cp("tiny/draft", "draft")
    p = d / "model.safetensors"
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", 200_000_000))
        f.truncate(200_000_000 + 8 + 1000)  # sparse: no disk used
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors", "max_secs": 3, "want_words": ["limit"]}


@case("W19", "#10", "manifest write: draft safetensors header nested 100,000 deep")
def _(c):
    d = c.cp("tiny/draft", "draft")
    _, data = st_read(d / "model.safetensors")
    st_write(d / "model.safetensors", deep().encode(), data)
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors"}


@case("W20", "#10", "manifest write: draft safetensors header with a 5000-digit integer")
def _(c):
    d = c.cp("tiny/draft", "draft")
    _, data = st_read(d / "model.safetensors")
    st_write(
        d / "model.safetensors",
        ('{"fc.weight": {"dtype": "F32", "shape": [' + huge_int() + '], "data_offsets": [0, 4]}}').encode(),
        data,
    )
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors"}


@case("W21", "ok", "manifest write: draft header length field claims 2**63 bytes")
def _(c):
    d = c.cp("tiny/draft", "draft")
    p = d / "model.safetensors"
    b = p.read_bytes()
    p.write_bytes(struct.pack("<Q", 2**63) + b[8:])
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors"}


@case(
    "W24",
    "#19",
    "manifest write: shard index points outside the checkpoint (../other/): refused by accident, misleading",
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    c.cp("tiny/draft", "other")
    h, _ = st_read(d / "model.safetensors")
    (d / "model.safetensors").unlink()
    jw(
        d / "model.safetensors.index.json",
        {"weight_map": {k: "../other/model.safetensors" for k in h if k != "__metadata__"}},
    )
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors.index.json",
            "want_words": ["field 'weight_map."]}


@case("W25", "#19", "manifest write: shard index points at an absolute path: refused by accident, misleading message")
def _(c):
    d = c.cp("tiny/draft", "draft")
    o = c.cp("tiny/draft", "other")
    h, _ = st_read(d / "model.safetensors")
    (d / "model.safetensors").unlink()
    jw(
        d / "model.safetensors.index.json",
        {"weight_map": {k: str(o / "model.safetensors") for k in h if k != "__metadata__"}},
    )
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors.index.json",
            "want_words": ["field 'weight_map."]}


@case("W26", "#10", "manifest write: shard index nested 100,000 deep")
def _(c):
    d = c.cp("tiny/draft", "draft")
    jw(d / "model.safetensors.index.json", deep())
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors.index.json"}


@case("W27", "#01", "manifest write: shard index unreadable (non-root)", user="nobody")
def _(c):
    d = c.cp("tiny/draft", "draft")
    jw(d / "model.safetensors.index.json", {"weight_map": {"fc.weight": "model.safetensors"}})
    return {
        "argv": write(d, c.b("tiny/target")),
        "names": "model.safetensors.index.json",
        "post": lambda: os.chmod(d / "model.safetensors.index.json", 0),
    }


@case("W28", "ok", "manifest write: draft model.safetensors unreadable (non-root)", user="nobody")
def _(c):
    d = c.cp("tiny/draft", "draft")
    return {
        "argv": write(d, c.b("tiny/target")),
        "names": "model.safetensors",
        "post": lambda: os.chmod(d / "model.safetensors", 0),
    }


@case(
    "W29",
    "#31",
    "manifest write: --layer-ids=-1,0_0,1 is read as [-1, 0, 1] (int() accepts '_', spaces, non-ASCII digits)",
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    return {"argv": write(d, c.b("tiny/target"), ids="-1,0_0,\u0661"), "names": "--layer-ids"}


@case(
    "W30", "#09", "manifest write: draft model.safetensors is a fifo: fc width silently 'not checked', exit 0 (no hang)"
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    mkfifo(d / "model.safetensors")
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors"}


@case("W31", "#17", "manifest write: header duplicate tensor name (two fc.weight entries), last wins")
def _(c):
    d = c.cp("tiny/draft", "draft")
    h, data = st_read(d / "model.safetensors")
    raw = json.dumps(h)
    raw = raw.replace('"fc.weight":', '"fc.weight": ' + json.dumps(h["fc.weight"]) + ', "fc.weight":', 1)
    st_write(d / "model.safetensors", raw.encode(), data)
    return {"argv": write(d, c.b("tiny/target")), "names": "model.safetensors"}


@case(
    "W32",
    "#03",
    "manifest write: DRAFT_DIR with a non-UTF-8 name: manifest written, then the 'wrote' print crashes",
    proc=True,
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    bad = Path(os.fsdecode(bytes(c.d) + b"/dr\xffaft"))
    d.rename(bad)
    return {
        "argv": write(bad, c.b("tiny/target")),
        "env": {"PYTHONIOENCODING": "utf-8:strict"},
        "expect_override": (0,),
    }


# ---- draft config readers (formats, stock_wiring, draft_config.DraftConfig, draft_model) ----


@case("I06", "#10", "inspect: draft config.json nested 100,000 deep")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / "config.json").write_text(deep())
    return {"argv": inspect(d), "names": "config.json"}


@case("I07", "#01", "inspect: draft config.json unreadable (non-root)", user="nobody")
def _(c):
    d = c.cp("tiny/draft", "draft")
    return {"argv": inspect(d), "names": "config.json", "post": lambda: os.chmod(d / "config.json", 0)}


@case("I08", "ok", "inspect: draft config.json is a directory")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / "config.json").unlink()
    (d / "config.json").mkdir()
    return {"argv": inspect(d), "names": "config.json"}


@case(
    "I10",
    "#32",
    "inspect: draft model.safetensors truncated: reported as a 'check' line, exit 1 (mis-wired), not 2",
    expect=(2,),
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-1000])
    return {"argv": inspect(d), "names": "model.safetensors"}


@case("I11", "#26", "inspect: no manifest, target num_hidden_layers 10**12: never finishes", timeout=20)
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / M).unlink()
    edit_json(d / "config.json", lambda x: x.pop("eagle_aux_hidden_state_layer_ids"))
    t = jw(c.p("t.json"), {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 10**12, "hidden_size": 96})
    return {"argv": inspect(d, t), "expect_override": (0, 1)}


@case("I12", "ok", "inspect: Kimi target, text_config.hidden_size a string")
def _(c):
    return {
        "argv": inspect(
            c.b("tiny/draft"),
            jw(
                c.p("t.json"),
                {
                    "architectures": ["KimiK25ForConditionalGeneration"],
                    "text_config": {"num_hidden_layers": 7, "hidden_size": "96"},
                },
            ),
        ),
        "names": "t.json",
    }


@case("I13", "#11", "inspect: target config.json with two num_hidden_layers keys (last wins)")
def _(c):
    t = c.p("t.json")
    t.write_text(
        '{"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "num_hidden_layers": 7, '
        '"hidden_size": 96}'
    )
    return {"argv": inspect(c.b("tiny/draft"), t), "names": "t.json"}


@case("V01", "#20", "verify: truncated draft model.safetensors (raw SafetensorError from Eagle3Draft.from_pretrained)")
def _(c):
    d = c.cp("tiny/draft", "draft")
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-1000])
    return {"argv": verify(d, c.b("tiny/samples")), "names": "model.safetensors"}


@case("V02", "#12", "verify: draft config.json not JSON (draft_model.from_pretrained: bare json.loads)")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / "config.json").write_text("{")
    return {"argv": verify(d, c.b("tiny/samples")), "names": "config.json"}


@case("V04", "#12", "verify: draft config.json not UTF-8")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / "config.json").write_bytes(b'{"a": "\xff"}')
    return {"argv": verify(d, c.b("tiny/samples")), "names": "config.json"}


@case("V09", "#22", "verify: draft hidden_size 1e400 (inf: OverflowError)")
def _(c):
    d = c.cp("tiny/draft", "draft")
    p = d / "config.json"
    p.write_text(p.read_text().replace('"hidden_size": 96', '"hidden_size": 1e400'))
    return {"argv": verify(d, c.b("tiny/samples")), "names": "config.json"}


@case("V15", "#24", "verify: draft d2t tensor has the wrong shape (load_state_dict RuntimeError)")
def _(c):
    d = c.cp("tiny/draft", "draft")
    sf_edit(d / "model.safetensors", lambda t: t.update(d2t=t["d2t"][:5].clone()))
    return {"argv": verify(d, c.b("tiny/samples")), "names": "model.safetensors"}


@case(
    "V16",
    "#21",
    "verify: a fifo named extra.safetensors in the draft dir: hangs (from_pretrained globs *.safetensors)",
    timeout=20,
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    mkfifo(d / "extra.safetensors")
    return {"argv": verify(d, c.b("tiny/samples")), "names": "extra.safetensors"}


@case("V17", "#21", "verify: a directory named old.safetensors in the draft dir")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / "old.safetensors").mkdir()
    return {"argv": verify(d, c.b("tiny/samples")), "names": "old.safetensors"}


@case(
    "V18", "#21", "verify: a stale shard old.safetensors (not in any index) with a conflicting fc.weight is loaded too"
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    from safetensors.torch import load_file, save_file

    t = load_file(str(d / "model.safetensors"))
    save_file({"fc.weight": t["fc.weight"] * 0}, str(d / "old.safetensors"))
    return {"argv": verify(d, c.b("tiny/samples")), "names": "old.safetensors"}


@case("V19", "#33", "verify: a sample token id >= vocab (IndexError in the embedding check)")
def _(c):
    s = c.cp("tiny/samples", "samples")
    torch_edit(s / "data_0.pt", lambda x: x["input_ids"].__setitem__(3, 100000))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.pt"}


@case("V20", "#33", "verify: a negative sample token id")
def _(c):
    s = c.cp("tiny/samples", "samples")
    torch_edit(s / "data_0.pt", lambda x: x["input_ids"].__setitem__(3, -7))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.pt"}


@case("V21", "#13", "verify: sample_lengths.json not UTF-8 (samples._parse_json catches neither UnicodeDecodeError)")
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "sample_lengths.json").write_bytes(b'{"0": "\xff"}')
    return {"argv": verify(c.b("tiny/draft"), s), "names": "sample_lengths.json"}


@case("V22", "#13", "verify: sample_lengths.json with a 5000-digit integer")
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "sample_lengths.json").write_text('{"0": ' + huge_int() + "}")
    return {"argv": verify(c.b("tiny/draft"), s), "names": "sample_lengths.json"}


@case("V23", "#13", "verify: sample_lengths.json nested 100,000 deep")
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "sample_lengths.json").write_text(deep())
    return {"argv": verify(c.b("tiny/draft"), s), "names": "sample_lengths.json"}


@case("V25", "#13", "verify: data_config.json not UTF-8")
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "data_config.json").write_bytes(b'{"x": "\xff"}')
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_config.json"}


@case(
    "V26",
    "#14",
    "verify: data_config.json layer_ids out of range / duplicated: accepted, verdict FAIL exit 1 (mis-wired)",
)
def _(c):
    s = c.cp("tiny/samples", "samples")
    jw(s / "data_config.json", {"hidden_states": {"layer_ids": [99, 99, -5, 10**12]}})
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_config.json"}


@case("V27", "#34", "verify: a fifo named data_99.pt among the samples: hangs", timeout=20)
def _(c):
    s = c.cp("tiny/samples", "samples")
    mkfifo(s / "data_99.pt")
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_99.pt"}


@case("V28", "#34", "verify: a fifo named hs_9.safetensors among hs samples: hangs", timeout=20)
def _(c):
    s = c.cp("hs", "hs")
    mkfifo(s / "hs_9.safetensors")
    return {"argv": verify(c.b("tiny/draft"), s), "names": "hs_9.safetensors"}


@case("V29", "#34", "verify: a fifo named data_9.ckpt.gz among SpecForge samples: hangs", timeout=20)
def _(c):
    s = c.cp("ckgz", "ckgz")
    mkfifo(s / "data_9.ckpt.gz")
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_9.ckpt.gz"}


@case("V30", "ok", "verify: a sample file unreadable (non-root)", user="nobody")
def _(c):
    s = c.cp("tiny/samples", "samples")
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.pt", "post": lambda: os.chmod(s / "data_0.pt", 0)}


@case("V31", "ok", "verify: a directory named data_99.pt among the samples")
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "data_99.pt").mkdir()
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_99.pt"}


@case("V32", "ok", "verify: a symlink loop named data_99.pt among the samples")
def _(c):
    s = c.cp("tiny/samples", "samples")
    loop_link(s / "data_99.pt")
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_99.pt"}


@case(
    "V33",
    "#05",
    "verify: data_99.pt is a symlink to /dev/zero: no hang, but torch's multi-line error is embedded",
    timeout=30,
)
def _(c):
    s = c.cp("tiny/samples", "samples")
    os.symlink("/dev/zero", s / "data_99.pt")
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_99.pt"}


@case("V34", "#35", "verify: SpecForge .ckpt whose hidden_state is 0 wide (ZeroDivisionError)")
def _(c):
    import torch

    s = c.cp("ck", "ck")
    torch_edit(s / "data_0.ckpt", lambda x: x.update(hidden_state=torch.zeros(1, x["input_ids"].shape[0], 0)))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.ckpt"}


@case("V65", "P6", "verify: a .ckpt.gz that inflates to 70 MiB (a gzip bomb) is refused before torch.load", timeout=60)
def _(c):
    import gzip

    s = c.cp("ckgz", "ckgz")
    (s / "data_0.ckpt.gz").write_bytes(gzip.compress(b"\0" * (70 << 20), compresslevel=1))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.ckpt.gz", "want_words": ["inflates"],
            "max_secs": 10}


@case("V35", "ok", "verify: truncated .ckpt.gz")
def _(c):
    s = c.cp("ckgz", "ckgz")
    p = s / "data_0.ckpt.gz"
    p.write_bytes(p.read_bytes()[:-200])
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.ckpt.gz"}


@case("V36", "ok", "verify: truncated hs_*.safetensors")
def _(c):
    s = c.cp("hs", "hs")
    p = s / "hs_0.safetensors"
    p.write_bytes(p.read_bytes()[:-200])
    return {"argv": verify(c.b("tiny/draft"), s), "names": "hs_0.safetensors"}


@case(
    "V37",
    "#05",
    "verify: pickle with a callable (os.system) is refused, not executed (ok); the message is torch's multi-line text",
)
def _(c):
    import pickle

    s = c.cp("tiny/samples", "samples")

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {c.d}/PWNED",))

    (s / "data_0.pt").write_bytes(pickle.dumps({"input_ids": Evil()}))
    return {
        "argv": verify(c.b("tiny/draft"), s),
        "names": "data_0.pt",
        "check": lambda: "pickle executed" if (c.d / "PWNED").exists() else None,
    }


@case("V38", "#40", "verify: --top-k 0 (IndexError)")
def _(c):
    return {"argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--top-k", "0"]), "names": "--top-k"}


@case("V39", "#40", "verify: --threads 0 (torch RuntimeError)")
def _(c):
    return {"argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--threads", "0"]), "names": "--threads"}


@case("V40", "#40", "verify: --margin nan: every run FAILs with exit 1 (mis-wired) instead of a usage error")
def _(c):
    return {"argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--margin", "nan"]), "names": "--margin"}


@case("V41", "#40", "verify: --batch-size -3 accepted")
def _(c):
    return {
        "argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--batch-size", "-3"]),
        "names": "--batch-size",
    }


@case("V42", "#24", "verify --target: target embedding of another vocab size (load_state_dict RuntimeError)")
def _(c):
    t = c.cp("tiny/target", "target")
    sf_edit(
        t / "model.safetensors",
        lambda x: x.update({"model.embed_tokens.weight": x["model.embed_tokens.weight"][:100].clone()}),
    )
    return {
        "argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--target", str(t)]),
        "names": "model.safetensors",
    }


@case("V44", "#16", "verify --target: target header offsets disagree with shape (data_offsets span != numel*size)")
def _(c):
    t = c.cp("tiny/target", "target")

    def f(h):
        e = h["model.embed_tokens.weight"]
        e["shape"] = [e["shape"][0] * 2, e["shape"][1]]

    st_edit(t / "model.safetensors", f)
    return {
        "argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--target", str(t)]),
        "names": "model.safetensors",
    }


@case("V45", "ok", "verify: legacy sample with a single hidden state")
def _(c):
    s = c.cp("tiny/samples", "samples")
    torch_edit(s / "data_0.pt", lambda x: x.update(hidden_states=x["hidden_states"][:1]))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.pt"}


@case("V46", "ok", "verify: legacy sample with float input_ids")
def _(c):
    s = c.cp("tiny/samples", "samples")
    torch_edit(s / "data_0.pt", lambda x: x.update(input_ids=x["input_ids"].float()))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.pt"}


@case("V47", "ok", "verify: samples of different widths")
def _(c):
    s = c.cp("tiny/samples", "samples")
    torch_edit(s / "data_5.pt", lambda x: x.update(hidden_states=[h[:, :64].clone() for h in x["hidden_states"]]))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_5.pt"}


@case("V49", "#11", "verify: sample_lengths.json with two '0' keys (last wins)")
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "sample_lengths.json").write_text('{"0": 31, "0": 32}')
    return {"argv": verify(c.b("tiny/draft"), s), "names": "sample_lengths.json"}


# ---- compare: dump metadata and tensors (doctor_compare.read_dump / compare) ----


def dump_copy(c: Ctx) -> tuple[Path, Path, Path]:
    d = c.cp("dump", "dump")
    st = sorted(d.glob("*.safetensors"))
    return d, st[0], st[0].with_suffix(".json")


@case("D01", "#15", "compare: dump metadata .json not JSON (bare json.loads)")
def _(c):
    d, _, meta = dump_copy(c)
    meta.write_text("{")
    return {"argv": compare(d, c.b("tiny/samples")), "names": meta.name}


@case("D05", "#15", "compare: dump metadata not UTF-8")
def _(c):
    d, _, meta = dump_copy(c)
    meta.write_bytes(b'{"a": "\xff"}')
    return {"argv": compare(d, c.b("tiny/samples")), "names": meta.name}


@case("D06", "#01", "compare: dump metadata unreadable (non-root)", user="nobody")
def _(c):
    d, _, meta = dump_copy(c)
    return {"argv": compare(d, c.b("tiny/samples")), "names": meta.name, "post": lambda: os.chmod(meta, 0)}


@case("D07", "#15", "compare: dump metadata nested 100,000 deep")
def _(c):
    d, _, meta = dump_copy(c)
    meta.write_text(deep())
    return {"argv": compare(d, c.b("tiny/samples")), "names": meta.name}


@case("D08", "#37", "compare: dumped positions are 2-D (TypeError in _runs)")
def _(c):
    d, t, _ = dump_copy(c)
    sf_edit(t, lambda x: x.update(positions=x["positions"][:, None].clone()))
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


@case("D09", "#37", "compare: dumped positions longer than aux rows (view RuntimeError)")
def _(c):

    d, t, _ = dump_copy(c)

    def f(x):
        n = x["aux_hidden_states"].shape[0]
        x["aux_hidden_states"] = x["aux_hidden_states"][: n - 5].clone()

    sf_edit(t, f)
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


@case("D10", "#37", "compare: dumped positions negative")
def _(c):
    d, t, _ = dump_copy(c)
    sf_edit(t, lambda x: x.update(positions=x["positions"] - 3))
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


@case("D11", "#37", "compare: dumped input_ids shorter than positions")
def _(c):
    d, t, _ = dump_copy(c)
    sf_edit(t, lambda x: x.update(input_ids=x["input_ids"][:3].clone()))
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


@case("D12", "#34", "compare: a fifo named x.safetensors in the dump dir: hangs", timeout=20)
def _(c):
    d, _, _ = dump_copy(c)
    mkfifo(d / "x.safetensors")
    return {"argv": compare(d, c.b("tiny/samples")), "names": "x.safetensors"}


@case("D13", "ok", "compare: a directory named x.safetensors in the dump dir")
def _(c):
    d, _, _ = dump_copy(c)
    (d / "x.safetensors").mkdir()
    return {"argv": compare(d, c.b("tiny/samples")), "names": "x.safetensors"}


@case("D14", "#38", "compare: two samples of different widths with the same chunk count (torch.cat RuntimeError)")
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "data_config.json").unlink()
    torch_edit(s / "data_2.pt", lambda x: x.update(hidden_states=[h[:, :64].clone() for h in x["hidden_states"]]))
    return {"argv": compare(c.b("dump"), s), "names": "data_2.pt"}


@case("D15", "#40", "compare: --min-cosine nan: FAIL exit 1 (mis-wired) instead of a usage error")
def _(c):
    return {"argv": compare(c.b("dump"), c.b("tiny/samples"), extra=["--min-cosine", "nan"]), "names": "--min-cosine"}


@case("D16", "ok", "compare: truncated dump batch")
def _(c):
    d, t, _ = dump_copy(c)
    t.write_bytes(t.read_bytes()[:-100])
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


@case(
    "D18", "#39", "compare: dumped aux rows NaN: exit 1 'matches no training tensor' (a corrupt dump read as mis-wired)"
)
def _(c):
    import torch

    d, t, _ = dump_copy(c)
    sf_edit(t, lambda x: x.update(aux_hidden_states=torch.full_like(x["aux_hidden_states"], float("nan"))))
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


@case("D19", "ok", "compare: aux 1-D")
def _(c):
    d, t, _ = dump_copy(c)
    sf_edit(t, lambda x: x.update(aux_hidden_states=x["aux_hidden_states"].flatten().clone()))
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


# ---- convert (convert.convert and helpers) ----


def spec(c: Ctx, fn=None) -> Path:
    d = c.cp("spec_draft", "src")
    if fn is not None:
        edit_json(d / "config.json", fn)
    return d


def tl(fn):
    return lambda x: fn(x["transformer_layer_config"])


@case("X04", "#41", "convert: speculators_config.verifier.name_or_path = 5, no --target (Path(5))")
def _(c):
    return {
        "argv": [
            "convert",
            str(spec(c, lambda x: x["speculators_config"]["verifier"].update(name_or_path=5))),
            str(c.p("out")),
        ],
        "names": "config.json",
    }


def shard(c: Ctx, paths: dict[str, str]) -> Path:
    """The speculators draft re-sharded: tensor -> shard path (relative to SRC, may leave it)."""
    from safetensors.torch import load_file, save_file

    d = spec(c)
    t = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    names = sorted(t)
    groups: dict[str, dict] = {}
    wm = {}
    for i, n in enumerate(names):
        rel = paths["a"] if i % 2 == 0 else paths["b"]
        groups.setdefault(rel, {})[n] = t[n]
        wm[n] = rel
    for rel, ts in groups.items():
        p = (d / rel).resolve() if not os.path.isabs(rel) else Path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        save_file(ts, str(p), metadata={"format": "pt"})
    jw(d / "model.safetensors.index.json", {"metadata": {}, "weight_map": wm})
    return d


@case(
    "X11",
    "#19",
    "convert: two shards with one basename in two subdirectories (collide in DST): refused by accident, misleading",
)
def _(c):
    d = shard(c, {"a": "a/model.safetensors", "b": "b/model.safetensors"})
    out = c.p("out")

    def check():
        if not out.exists():
            return None
        from safetensors.torch import load_file

        have = set()
        for f in out.rglob("*.safetensors"):
            have |= set(load_file(str(f)))
        idx = jr(out / "model.safetensors.index.json")["weight_map"]
        missing = [n for n in idx if n not in have]
        return f"DST lacks {len(missing)} of {len(idx)} tensors its index lists" if missing else None

    return {
        "argv": convert(d, out, c.b("kimi")),
        "names": "model.safetensors.index.json",
        "check": check,
        "want_words": ["field 'weight_map."],
    }


@case(
    "X12",
    "#19",
    "convert: shard index entries point outside SRC (../elsewhere/): opened and parsed, then refused, misleading",
)
def _(c):
    d = shard(c, {"a": "../elsewhere/s1.safetensors", "b": "s2.safetensors"})
    out = c.p("out")
    return {"argv": convert(d, out, c.b("kimi")), "names": "model.safetensors.index.json",
            "want_words": ["field 'weight_map."]}


@case("X13", "#43", "convert: DST is a symlink to an empty directory (rmdir on a symlink)")
def _(c):
    (c.p("empty")).mkdir()
    os.symlink(c.p("empty"), c.p("out"))
    return {"argv": convert(c.b("spec_draft"), c.p("out"), c.b("kimi")), "names": "out"}


@case("X14", "#44", "convert: .DST.converting exists as a regular file (rmtree on a file)", expect=(0,))
def _(c):
    # fixed: convert's temporary directory has a unique name (mkdtemp); a user file of the old name is not touched
    c.p(".out.converting").write_text("user file\n")
    return {"argv": convert(c.b("spec_draft"), c.p("out"), c.b("kimi")),
            "check": lambda: None if c.p(".out.converting").read_text() == "user file\n" else "user file changed"}


@case("X15", "#44", "convert: .DST.converting is a symlink to a directory (rmtree refuses symlinks)")
def _(c):
    (c.p("keep")).mkdir()
    (c.p("keep") / "data").write_text("x")
    os.symlink(c.p("keep"), c.p(".out.converting"))
    # fixed: not convert's name any more; the link and what it points at stay as they were
    return {"argv": convert(c.b("spec_draft"), c.p("out"), c.b("kimi")), "expect_override": (0,),
            "check": lambda: None if c.p(".out.converting").is_symlink() and (c.p("keep") / "data").exists() else
            "user symlink or its target touched"}


@case(
    "X16",
    "#44",
    "convert: a pre-existing directory .DST.converting with user files is deleted without a word",
    expect=(0,),  # fixed: a unique temporary name; the user's directory is left alone
)
def _(c):
    (c.p(".out.converting")).mkdir()
    (c.p(".out.converting") / "notes.txt").write_text("mine\n")
    return {
        "argv": convert(c.b("spec_draft"), c.p("out"), c.b("kimi")),
        "names": ".out.converting",
        "check": lambda: "user file deleted" if not (c.p(".out.converting") / "notes.txt").exists() else None,
    }


@case("X17", "#01", "convert: DST parent not writable (non-root)", user="nobody")
def _(c):
    (c.p("ro")).mkdir()
    return {
        "argv": convert(c.b("spec_draft"), c.p("ro") / "out", c.b("kimi")),
        "names": "ro",
        "post": lambda: os.chmod(c.p("ro"), 0o555),
    }


@case("X18", "#01", "convert: SRC config.json unreadable (non-root)", user="nobody")
def _(c):
    d = spec(c)
    return {
        "argv": convert(d, c.p("out"), c.b("kimi")),
        "names": "config.json",
        "post": lambda: os.chmod(d / "config.json", 0),
    }


@case("X19", "#01", "convert: SRC directory not searchable (non-root): is_file() raises PermissionError", user="nobody")
def _(c):
    d = spec(c)
    return {"argv": convert(d, c.p("out"), c.b("kimi")), "names": "src", "post": lambda: os.chmod(d, 0o600)}


@case("X20", "ok", "convert: DST is an existing non-empty directory")
def _(c):
    (c.p("out")).mkdir()
    (c.p("out") / "x").write_text("x")
    return {"argv": convert(c.b("spec_draft"), c.p("out"), c.b("kimi")), "names": "out"}


@case("X21", "ok", "convert: DST is SRC")
def _(c):
    d = spec(c)
    return {"argv": convert(d, d, c.b("kimi")), "names": "src"}


@case("X22", "ok", "convert: truncated SRC weights")
def _(c):
    d = spec(c)
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-500])
    return {"argv": convert(d, c.p("out"), c.b("kimi")), "names": "model.safetensors"}


@case("X24", "#10", "convert: SRC config.json nested 100,000 deep")
def _(c):
    d = spec(c)
    (d / "config.json").write_text(deep())
    return {"argv": convert(d, c.p("out"), c.b("kimi")), "names": "config.json"}


@case("X25", "#11", "convert: SRC config.json with two eagle_aux_hidden_state_layer_ids keys (last wins)")
def _(c):
    d = spec(c)
    p = d / "config.json"
    p.write_text(
        p.read_text().replace(
            '"eagle_aux_hidden_state_layer_ids"',
            '"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "eagle_aux_hidden_state_layer_ids"',
            1,
        )
    )
    return {"argv": convert(d, c.p("out"), c.b("kimi")), "names": "config.json"}


@case("X27", "#47", "convert: a header with 30,000 tensor names (_name_map is quadratic)", timeout=300)
def _(c):
    d = spec(c)

    def f(h):
        for i in range(30000):
            h[f"junk.{i}"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}

    st_edit(d / "model.safetensors", f)
    return {"argv": convert(d, c.p("out"), c.b("kimi")), "names": "model.safetensors", "max_secs": 5}


@case("X28", "#09", "convert: SRC model.safetensors is a fifo: 'no weights found' (misleading, no hang)")
def _(c):
    d = spec(c)
    mkfifo(d / "model.safetensors")
    return {
        "argv": convert(d, c.p("out"), c.b("kimi")),
        "names": "model.safetensors",
        "want_words": ["fifo", "not a regular file"],
    }


# ---- added in the second pass ----


@case("M25", "#09", "manifest: a dangling symlink (show says 'no layer manifest found')")
def _(c):
    d = c.cp("tiny/draft", "draft")
    (d / M).unlink()
    os.symlink(c.p("gone.json"), d / M)
    return {"argv": show(d), "names": M, "want_words": ["dangling", "symlink", "broken"]}


@case("V50", "#09", "verify: --data names a fifo: 'no such file or directory' (misleading; no hang)")
def _(c):
    return {
        "argv": verify(c.b("tiny/draft"), mkfifo(c.p("data_0.pt"))),
        "names": "data_0.pt",
        "want_words": ["fifo", "not a regular file"],
    }


@case("X29", "#01", "convert: DST's parent is a regular file (mkdir NotADirectoryError/FileExistsError)")
def _(c):
    c.p("afile").write_text("x")
    return {"argv": convert(c.b("spec_draft"), c.p("afile") / "out", c.b("kimi")), "names": "afile"}


@case(
    "X30", "#46", "convert: DST name of 250 bytes: the temporary sibling '.NAME.converting' exceeds NAME_MAX (OSError)"
)
def _(c):
    # fixed: the temporary name no longer grows with DST's name, so a DST name NAME_MAX allows converts
    return {"argv": convert(c.b("spec_draft"), c.p("o" * 250), c.b("kimi")), "expect_override": (0,),
            "check": lambda: None if (c.p("o" * 250) / "eagle3_manifest.json").exists() else "DST not written"}


@case("X31", "#01", "convert: the disk fills up while writing (RLIMIT_FSIZE 64 KiB: EFBIG from save_file)")
def _(c):
    return {
        "argv": convert(c.b("spec_draft"), c.p("out"), c.b("kimi")),
        "names": "out",
        "fsize": 64 << 10,
        "check": lambda: (
            ("left " + ", ".join(p.name for p in c.d.iterdir() if p.name.startswith(".out")))
            if any(p.name.startswith(".out") for p in c.d.iterdir())
            else None
        ),
    }


@case(
    "W33",
    "#01",
    "manifest write: the disk fills up (RLIMIT_FSIZE 100 bytes): traceback, eagle3_manifest.json.tmp left behind",
)
def _(c):
    d = c.cp("tiny/draft", "draft")
    return {
        "argv": write(d, c.b("tiny/target")),
        "names": M,
        "fsize": 100,
        "check": lambda: "left eagle3_manifest.json.tmp" if (d / (M + ".tmp")).exists() else None,
    }


@case("X32", "ok", "convert: SRC does not exist")
def _(c):
    return {"argv": convert(c.p("nope"), c.p("out"), c.b("kimi")), "names": "nope"}


@case("I14", "ok", "inspect: DRAFT_DIR is a regular file")
def _(c):
    c.p("f").write_text("x")
    return {"argv": inspect(c.p("f")), "names": "f"}


@case("D20", "ok", "compare: --dump is a fifo, --data fine: 'no dumped batches' (acceptable) ")
def _(c):
    return {"argv": compare(mkfifo(c.p("dumpfifo")), c.b("tiny/samples")), "names": "dumpfifo"}


@case(
    "D21",
    "#37",
    "compare: dumped input_ids of another dtype (float): rows silently unmatched or matched by float equality",
    expect=(2,),
)
def _(c):
    d, t, _ = dump_copy(c)
    sf_edit(t, lambda x: x.update(input_ids=x["input_ids"].float() + 0.5))
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name}


# ---- third pass: directory walking, more readers ----


@case(
    "V53",
    "#36",
    "verify: a sample directory holding an unreadable subdirectory (non-root): skipped silently, exit 0",
    user="nobody",
)
def _(c):
    s = c.cp("tiny/samples", "samples")
    (s / "private").mkdir()
    return {"argv": verify(c.b("tiny/draft"), s), "names": "private", "post": lambda: os.chmod(s / "private", 0)}


@case(
    "V54",
    "#36",
    "verify: samples reached through a symlinked subdirectory are skipped silently (rglob does not follow)",
    expect=(0,),  # fixed: directory symlinks are followed (each directory once), so the samples are verified
)
def _(c):
    (c.p("data")).mkdir()
    os.symlink(c.b("tiny/samples"), c.p("data") / "run1")
    return {"argv": verify(c.b("tiny/draft"), c.p("data")), "names": "run1", "want_words": ["symlink"]}


@case("V56", "ok", "verify: hs_*.safetensors with float token_ids")
def _(c):
    s = c.cp("hs", "hs")
    sf_edit(s / "hs_0.safetensors", lambda x: x.update(token_ids=x["token_ids"].float()))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "hs_0.safetensors"}


@case("V57", "ok", "verify: hs_*.safetensors with hidden_states of 1 layer")
def _(c):
    s = c.cp("hs", "hs")
    sf_edit(s / "hs_0.safetensors", lambda x: x.update(hidden_states=x["hidden_states"][:, :1].contiguous()))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "hs_0.safetensors"}


@case("V59", "ok", "verify: SpecForge .ckpt with a loss_mask of the wrong length")
def _(c):
    s = c.cp("ck", "ck")
    torch_edit(s / "data_0.ckpt", lambda x: x.update(loss_mask=x["loss_mask"][:3].clone()))
    return {"argv": verify(c.b("tiny/draft"), s), "names": "data_0.ckpt"}


@case("V62", "ok", "verify --target: target model.safetensors truncated")
def _(c):
    t = c.cp("tiny/target", "target")
    p = t / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-4000])
    return {
        "argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--target", str(t)]),
        "names": "model.safetensors",
    }


@case("V63", "#09", "verify --target: target model.safetensors is a fifo ('no weights found'; no hang)")
def _(c):
    t = c.cp("tiny/target", "target")
    mkfifo(t / "model.safetensors")
    return {
        "argv": verify(c.b("tiny/draft"), c.b("tiny/samples"), extra=["--target", str(t)]),
        "names": "model.safetensors",
        "want_words": ["fifo", "not a regular file"],
    }


@case("W34", "ok", "manifest write: target config.json not UTF-8")
def _(c):
    return {
        "argv": write(
            c.cp("tiny/draft", "draft"),
            jw(c.p("t.json"), "x") and (c.p("t.json").write_bytes(b'{"a": "\xff"}') and c.p("t.json")),
        ),
        "names": "t.json",
    }


@case("W35", "ok", "manifest write: target config.json truncated")
def _(c):
    return {
        "argv": write(
            c.cp("tiny/draft", "draft"), jw(c.p("t.json"), (c.b("tiny/target") / "config.json").read_text()[:300])
        ),
        "names": "t.json",
    }


@case("W36", "#09", "manifest write: --target is a symlink loop ('target config not found')")
def _(c):
    return {
        "argv": write(c.cp("tiny/draft", "draft"), loop_link(c.p("t.json"))),
        "names": "t.json",
        "want_words": ["symlink", "loop"],
    }


@case("W37", "ok", "manifest write: target num_hidden_layers negative")
def _(c):
    return {
        "argv": write(
            c.cp("tiny/draft", "draft"),
            jw(c.p("t.json"), {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": -7, "hidden_size": 96}),
        ),
        "names": "t.json",
    }


@case("W38", "ok", "manifest write: Kimi target, text_config.num_hidden_layers 7.0")
def _(c):
    return {
        "argv": write(
            c.cp("tiny/draft", "draft"),
            jw(
                c.p("t.json"),
                {
                    "architectures": ["KimiK25ForConditionalGeneration"],
                    "text_config": {"num_hidden_layers": 7.0, "hidden_size": 96},
                },
            ),
        ),
        "names": "t.json",
    }


@case("D22", "#09", "compare: dump directory unreadable (non-root): 'no dumped batches' (misleading)", user="nobody")
def _(c):
    d, _, _ = dump_copy(c)
    return {
        "argv": compare(d, c.b("tiny/samples")),
        "names": "dump",
        "want_words": ["permission", "Permission"],
        "post": lambda: os.chmod(d, 0o311),
    }


@case("D23", "ok", "compare: dumped aux_hidden_states as int64")
def _(c):
    d, t, _ = dump_copy(c)
    sf_edit(t, lambda x: x.update(aux_hidden_states=x["aux_hidden_states"].long()))
    return {"argv": compare(d, c.b("tiny/samples")), "names": t.name, "expect_override": (1, 2)}


@case(
    "V64",
    "#52",
    "verify: every loss mask is zero: 'no scored positions' exits 1 (mis-wired); exit 3 (ambiguous) is never used",
    expect=(3,),
)
def _(c):
    import torch

    s = c.cp("tiny/samples", "samples")
    for f in s.glob("data_*.pt"):
        torch_edit(f, lambda x: x.update(loss_mask=torch.zeros_like(x["loss_mask"])))
    return {"argv": verify(c.b("tiny/draft"), s)}


# --------------------------------------------------------------------------------------------------------------------
# running the cases


@pytest.fixture(scope="module")
def base():
    """The valid inputs, in a directory an unprivileged user can read (the uid-65534 cases use it too)."""
    root = world_readable_dir("e3c-catalog-")
    try:
        yield build_base(root / "base")
    finally:
        subprocess_chmod(root)
        shutil.rmtree(root, ignore_errors=True)


def subprocess_chmod(root: Path) -> None:
    """Give the owner back every permission a case took away, so the tree can be removed."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if not p.is_symlink():
                try:
                    p.chmod(p.stat().st_mode | stat.S_IRWXU)
                except OSError:
                    pass


def _marks(cs: Case):
    pending = [pytest.mark.xfail(reason=f"cause {PENDING[cs.id]} not fixed yet", strict=True)] if cs.id in PENDING \
        else []
    return [*pending, pytest.mark.timeout(max(30.0, cs.timeout + 10))]


def _judge(cs: Case, spec: dict, r: Result) -> list[str]:
    expect = spec.get("expect_override", cs.expect)
    found = problems(
        r,
        expect=expect,
        names=spec.get("names"),
        want_words=spec.get("want_words", ()),
        max_secs=spec.get("max_secs", 20.0),
        max_err_bytes=spec.get("max_err_bytes", 4096),
    )
    if spec.get("forbid_out") and spec["forbid_out"] in r.out:
        found.append(f"printed {spec['forbid_out']!r}")
    if spec.get("check"):
        msg = spec["check"]()
        if msg:
            found.append(f"side effect: {msg}")
    return found


def _run_forked(argv, cwd: Path, fsize: int) -> Result:
    """A full disk: the command runs in a forked child whose files may not grow past ``fsize`` bytes (EFBIG)."""
    import pickle

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, hard))
            res = run_cli(argv, cwd)
            os.write(w, pickle.dumps(res))
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return pickle.loads(data)


LOCAL = [cs for cs in CASES if cs.user is None and not cs.proc]
IN_A_PROCESS = [cs for cs in CASES if cs.user is None and cs.proc]
UNPRIVILEGED = [cs for cs in CASES if cs.user == "nobody"]
assert {cs.id for cs in CASES} == {cs.id for cs in (*LOCAL, *IN_A_PROCESS, *UNPRIVILEGED)}, "a case no list runs"


@pytest.mark.parametrize("cs", [pytest.param(cs, id=cs.id, marks=_marks(cs)) for cs in LOCAL])
def test_catalog_case(cs: Case, base: Path, tmp_path: Path):
    d = tmp_path / cs.id
    d.mkdir()
    spec = cs.build(Ctx(base, d))
    if spec.get("post"):
        spec["post"]()
    if spec.get("fsize"):
        r = _run_forked(spec["argv"], d, spec["fsize"])
    else:
        r = run_cli(spec["argv"], d)
    found = _judge(cs, spec, r)
    assert not found, f"{cs.id} ({cs.cause}: {cs.title}): " + "; ".join(found)


@pytest.mark.parametrize("cs", [pytest.param(cs, id=cs.id, marks=_marks(cs)) for cs in IN_A_PROCESS])
def test_catalog_case_in_a_process(cs: Case, base: Path, tmp_path: Path):
    """Cases only a real interpreter shows (its stdout encoding): the command in a process of its own."""
    d = tmp_path / cs.id
    d.mkdir()
    spec = cs.build(Ctx(base, d))
    r = run_cli_process(spec["argv"], d, spec.get("env"), timeout=cs.timeout)
    found = _judge(cs, spec, r)
    assert not found, f"{cs.id} ({cs.cause}: {cs.title}): " + "; ".join(found)


@pytest.fixture(scope="module")
def unprivileged_results(base: Path):
    """Every uid-65534 case built (as root), then run in one unprivileged child Python."""
    root = world_readable_dir("e3c-nobody-")
    specs, runs = {}, []
    for cs in UNPRIVILEGED:
        d = root / cs.id
        d.mkdir()
        specs[cs.id] = cs.build(Ctx(base, d))
        for dirpath, dirnames, filenames in os.walk(d):  # as run_all.py: everything the user's own
            for name in dirnames + filenames:
                p = Path(dirpath) / name
                if not p.is_symlink():
                    p.chmod(p.stat().st_mode | 0o777 if p.is_dir() else 0o666)
        if specs[cs.id].get("post"):
            specs[cs.id]["post"]()
        runs.append((cs.id, specs[cs.id]["argv"], d))
    try:
        results = run_as_user(runs)
        yield specs, results
    finally:
        subprocess_chmod(root)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cs", [pytest.param(cs, id=cs.id, marks=_marks(cs)) for cs in UNPRIVILEGED])
def test_catalog_case_unprivileged(cs: Case, unprivileged_results):
    specs, results = unprivileged_results
    assert not isinstance(results, str), f"cannot run without root's permission bypass here: {results}"
    found = _judge(cs, specs[cs.id], results[cs.id])
    assert not found, f"{cs.id} ({cs.cause}: {cs.title}) as uid 65534: " + "; ".join(found)
