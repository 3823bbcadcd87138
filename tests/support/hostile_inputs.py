"""Hostile inputs for the fuzz suite (tests/unit/test_fuzz_*.py): valid inputs to mutate, mutators, and the runs.

:func:`build_base` writes every valid input once (the committed tiny fixture's target, draft and samples; the same
samples as ``hs_*.safetensors``, SpecForge ``.ckpt`` and ``.ckpt.gz``; a capture dump of three samples; a
speculators draft and a SpecForge draft with their targets). Mutators change a copy: JSON documents
(:func:`edit_json`), safetensors headers (:func:`st_edit`), ``torch.save`` files (:func:`torch_edit`), special files
(:func:`mkfifo`, :func:`loop_link`).

:func:`run_cli` drives ``sglang_eagle3_capture.doctor.cli.main`` in this process (as the console script does) and
:func:`check_bad_input` holds a result to the contract: exit 2, one line on stderr naming the file and ``fix:``, no
traceback, bounded time. :func:`run_as_user` runs a batch of commands in one child Python without the capabilities by
which root ignores file permissions.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import REPO

FIXTURE = REPO / "fixtures" / "tiny"
VFLAGS = ["--threads", "1", "--max-combinations", "0", "--no-progress"]
M = "eagle3_manifest.json"


# --- mutators -------------------------------------------------------------------------------------------------------


def jw(p: Path, obj) -> Path:
    """Write ``obj`` (JSON-encoded unless it is already text or bytes) to ``p``."""
    p = Path(p)
    if isinstance(obj, bytes):
        p.write_bytes(obj)
    else:
        p.write_text(obj if isinstance(obj, str) else json.dumps(obj, indent=1))
    return p


def edit_json(p: Path, fn: Callable) -> Path:
    """Load ``p``, let ``fn`` change the document in place, write it back."""
    d = json.loads(Path(p).read_text())
    fn(d)
    return jw(p, d)


def st_read(p: Path):
    """``(header dict, data bytes)`` of a safetensors file."""
    b = Path(p).read_bytes()
    (n,) = struct.unpack("<Q", b[:8])
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_write(p: Path, header, data: bytes) -> Path:
    """A safetensors file from a header (dict, or raw bytes written as they are) and data bytes."""
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    Path(p).write_bytes(struct.pack("<Q", len(hb)) + hb + data)
    return Path(p)


def st_edit(p: Path, fn: Callable) -> Path:
    """Change a safetensors header in place with ``fn``."""
    h, data = st_read(p)
    fn(h)
    return st_write(p, h, data)


def deep(n: int = 100000, leaf: str = "1") -> str:
    return "[" * n + leaf + "]" * n


def huge_int(digits: int = 5000) -> str:
    return "1" * digits


def mkfifo(p: Path) -> Path:
    if p.exists() or p.is_symlink():
        p.unlink()
    os.mkfifo(p)
    return p


def loop_link(p: Path) -> Path:
    """``p`` becomes a symlink to itself (ELOOP)."""
    if p.exists() or p.is_symlink():
        p.unlink()
    os.symlink(p.name, p)
    return p


def torch_edit(p: Path, fn: Callable) -> Path:
    import torch

    d = torch.load(p, weights_only=True)
    fn(d)
    torch.save(d, p)
    return p


def sf_edit(p: Path, fn: Callable) -> Path:
    from safetensors.torch import load_file, save_file

    t = load_file(str(p))
    fn(t)
    save_file(t, str(p))
    return p


def truncate(p: Path, n: int) -> Path:
    """Drop the last ``n`` bytes of ``p``."""
    p.write_bytes(p.read_bytes()[:-n])
    return p


# --- the valid inputs -----------------------------------------------------------------------------------------------


def build_base(base: Path) -> Path:
    """Every valid input the cases mutate, under ``base`` (see the module doc)."""
    import torch
    from safetensors.torch import save_file

    from sglang_eagle3_capture.doctor.samples import load_sample
    from sglang_eagle3_capture.observe.dump import CaptureDump

    from .speculators_drafts import build_specforge_draft, build_speculators_draft, write_target

    base.mkdir(parents=True, exist_ok=True)
    shutil.copytree(FIXTURE, base / "tiny")
    samples = [load_sample(p) for p in sorted((base / "tiny/samples").glob("data_*.pt"), key=lambda p: int(p.stem[5:]))]
    for sub in ("hs", "ck", "ckgz"):
        (base / sub).mkdir()
    for i, s in enumerate(samples[:6]):
        save_file({"hidden_states": torch.stack(list(s.chunks), dim=1).contiguous(), "token_ids": s.input_ids.clone()},
                  str(base / "hs" / f"hs_{i}.safetensors"))
        d = {"input_ids": s.input_ids.clone(), "loss_mask": s.loss_mask.long(),
             "hidden_state": s.chunks[3].unsqueeze(0).clone(),
             "aux_hidden_state": torch.cat(list(s.chunks[:3]), dim=-1).unsqueeze(0).clone()}
        torch.save(d, base / "ck" / f"data_{i}.ckpt")
        with gzip.open(base / "ckgz" / f"data_{i}.ckpt.gz", "wb") as f:
            torch.save(d, f)
    dump = CaptureDump(base / "dump", metadata={"layer_ids": [-1, 0, 1], "tp_rank": 0}, max_batches=2)
    for group in (samples[:2], samples[2:3]):
        aux = torch.cat([torch.cat(list(s.chunks[:3]), dim=-1) for s in group])
        ids = torch.cat([s.input_ids for s in group])
        pos = torch.cat([torch.arange(s.seq_len) for s in group])
        dump(aux, ids, pos)
    build_speculators_draft(base / "spec_draft")
    build_specforge_draft(base / "sf_draft", ids=(1, 29, 57))
    write_target(base / "kimi")
    write_target(base / "dsv3", architecture="DeepseekV3ForCausalLM")
    return base


def world_readable_dir(prefix: str) -> Path:
    """A new directory under the system temp dir that an unprivileged user can enter (pytest's are mode 0700)."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    return d


class Ctx:
    """A fresh case directory ``d``; :meth:`cp` copies a base input into it, :meth:`b` names one read-only."""

    def __init__(self, base: Path, d: Path):
        self.base, self.d = base, d

    def cp(self, name: str, as_: str | None = None) -> Path:
        src, dst = self.base / name, self.d / (as_ or name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst)
        return dst

    def b(self, name: str) -> Path:
        return self.base / name

    def p(self, name: str) -> Path:
        return self.d / name


# --- argv builders --------------------------------------------------------------------------------------------------


def verify(draft, *data, extra=()):
    return ["verify", str(draft), "--data", *map(str, data), *VFLAGS, *extra]


def inspect(draft, target=None, extra=()):
    return ["inspect", str(draft)] + (["--target", str(target)] if target else []) + list(extra)


def show(draft, extra=()):
    return ["manifest", "show", str(draft), *extra]


def write(draft, target, ids="-1,0,1", extra=("--force",)):
    return ["manifest", "write", str(draft), f"--layer-ids={ids}", "--target", str(target), *extra]


def compare(dump, *data, extra=()):
    return ["compare", "--dump", str(dump), "--data", *map(str, data), *extra]


def convert(src, dst, target, extra=()):
    return ["convert", str(src), str(dst), "--target", str(target), *extra]


# --- running and judging --------------------------------------------------------------------------------------------


@dataclass
class Result:
    rc: int
    out: str
    err: str
    secs: float


_UNBLOCK = r"""sleep "$1"; find "$2" -type p -exec timeout 2 sh -c ': > "$1"' _ {} \;"""


def run_cli(argv, cwd: Path | None = None, *, unblock_after: float = 20.0) -> Result:
    """``sglang-eagle3-capture ARGV`` in this process (``cli.main``), stdout/stderr captured, cwd changed for it.

    After ``unblock_after`` seconds a watchdog process opens every fifo under ``cwd`` for writing: a reader stuck in
    ``open()`` on one (a bug this suite exists to catch; native code may hold the GIL while it waits, so the watchdog
    is not a thread) then reads EOF and goes on, and the hang fails the test instead of stalling the run."""
    from sglang_eagle3_capture.doctor import cli

    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    watchdog = None
    t0 = time.monotonic()
    try:
        if cwd is not None:
            os.chdir(cwd)
            watchdog = subprocess.Popen(["sh", "-c", _UNBLOCK, "sh", str(unblock_after), str(cwd)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main([str(a) for a in argv])
    finally:
        if watchdog is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(watchdog.pid, signal.SIGKILL)
            watchdog.wait()
        os.chdir(old)
    return Result(rc, out.getvalue(), err.getvalue(), time.monotonic() - t0)


def run_cli_process(argv, cwd: Path, env: dict | None = None, timeout: float = 120.0) -> Result:
    """``python -m sglang_eagle3_capture ARGV`` in a process of its own, with ``env`` added to this one's (for what
    only a real process shows: the interpreter's own stdout encoding, ``PYTHONIOENCODING``)."""
    from support import subprocess_env

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "sglang_eagle3_capture", *[str(a) for a in argv]], cwd=cwd,
                       env={**subprocess_env(), **(env or {})}, capture_output=True, timeout=timeout)
    decode = lambda b: b.decode("utf-8", errors="backslashreplace")  # noqa: E731
    return Result(p.returncode, decode(p.stdout), decode(p.stderr), time.monotonic() - t0)


def problems(r: Result, *, expect=(2,), names: str | None = None, want_words=(), max_secs: float = 20.0,
             max_err_bytes: int = 4096) -> list[str]:
    """Everything wrong with a run that must refuse a bad input (empty when it behaved)."""
    out = []
    lines = [line for line in r.err.splitlines() if line.strip()]
    if "Traceback" in r.err or "internal error" in r.err:
        out.append(f"traceback / internal error: {r.err[-600:]}")
    if r.rc not in expect:
        out.append(f"exit {r.rc}, expected {expect}; stderr {r.err[-300:]!r}; stdout tail {r.out[-300:]!r}")
    if r.rc == 2:
        if len(lines) != 1:
            out.append(f"{len(lines)} lines on stderr: {r.err[:600]!r}")
        if "fix:" not in r.err and not r.err.startswith("usage:"):
            out.append(f"no 'fix:' in {r.err[:400]!r}")
        if names and names not in r.err:
            out.append(f"does not name {names!r}: {r.err[:400]!r}")
        if want_words and not any(w in r.err for w in want_words):
            out.append(f"names none of {want_words}: {r.err[:400]!r}")
        if len(r.err) > max_err_bytes:
            out.append(f"{len(r.err)} bytes on stderr")
    if r.secs > max_secs:
        out.append(f"took {r.secs:.1f} s (bound {max_secs} s)")
    if "\x1b" in r.out or "\x1b" in r.err:
        out.append("raw terminal escape printed")
    return out


# --- as an unprivileged user ----------------------------------------------------------------------------------------

_DRIVER = r"""
import contextlib, io, json, os, sys, time
spec = json.loads(sys.stdin.read())
from sglang_eagle3_capture.doctor import cli
results = {}
for case_id, argv, cwd in spec:
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    os.chdir(cwd)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(argv)
        except BaseException as e:
            import traceback
            traceback.print_exc(file=err)
            rc = 1
    results[case_id] = [rc, out.getvalue(), err.getvalue(), time.monotonic() - t0]
sys.stdout.write(json.dumps(results))
"""


# The capabilities by which root ignores file permissions (capabilities(7)): without them root meets a file's mode
# bits as any other user does (as "other" on files the cases give to uid 65534, as the owner on its own).
_PERMISSION_BYPASS = ("dac_override", "dac_read_search", "fowner")


def unprivileged_python() -> tuple[list[str], dict] | str:
    """``(command prefix, environment)`` that runs this package's Python without the power to ignore file
    permissions, or why it cannot.

    Switching to uid 65534 would need an interpreter and packages that user can read: a virtual environment under
    ``/root`` (mode 0700) is not, so on CI such cases could only skip. Dropping the permission-bypassing capabilities
    from the bounding set instead (``setpriv``; an exec as uid 0 then gets none of them) keeps this interpreter and
    environment and leaves exactly the permission checks the cases are about."""
    if os.geteuid() != 0:
        return "not root: cannot give the cases' files to another user"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    drop = ",".join(f"-{cap}" for cap in _PERMISSION_BYPASS)
    prefix = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYTHONDONTWRITEBYTECODE": "1"}
    probe = subprocess.run([*prefix, sys.executable, "-c", "import torch, sglang_eagle3_capture.doctor.cli"], env=env,
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return f"setpriv could not drop {drop} here: {probe.stderr.strip()[-300:]}"
    return [*prefix, sys.executable], env


def run_as_user(cases: list[tuple[str, list[str], Path]], timeout: float = 300) -> dict[str, Result] | str:
    """Run ``(id, argv, cwd)`` commands without the power to ignore file permissions in one child Python;
    ``{id: Result}``, or why it cannot."""
    how = unprivileged_python()
    if isinstance(how, str):
        return how
    cmd, env = how
    spec = json.dumps([(i, [str(a) for a in argv], str(cwd)) for i, argv, cwd in cases])
    p = subprocess.run([*cmd, "-c", _DRIVER], input=spec, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"the unprivileged driver failed ({p.returncode}): {p.stderr[-2000:]}")
    return {k: Result(*v) for k, v in json.loads(p.stdout).items()}


# --- hypothesis strategies: hostile JSON documents and values -------------------------------------------------------


def _hypothesis():
    from hypothesis import strategies as st

    return st


HOSTILE_STRINGS = ["", "\x1b[2J", "a\nverdict: OK", "\ud800", "\x00", "é", "../../etc/passwd", "/abs/path",
                   "x" * 300, "model.safetensors", "sub/model.safetensors", "NaN"]
HOSTILE_NUMBERS = [0, -1, 1, 2, 3, 96, 2**31, 2**63, -(2**63), 10**30, 10**39, 0.5, -0.0, 96.0, 1e308, 7.5e-9]


def json_values(max_leaves: int = 8):
    """Any JSON value, with the numbers and strings that break readers (huge, negative, fractional, control
    characters, lone surrogates, paths)."""
    st = _hypothesis()
    scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(HOSTILE_NUMBERS), st.integers(-(10**20), 10**20),
                        st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(HOSTILE_STRINGS),
                        st.text(max_size=12))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                        st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=max_leaves)


def _paths(doc, prefix=()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc, path, value):
    if not path:
        return value
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


def _delete(doc, path):
    if not path:
        return doc
    node = doc
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return doc


TEXT_MUTATIONS = ("none", "truncate", "duplicate-key", "non-utf8", "bom", "deep", "nan", "huge-int", "empty",
                  "not-an-object")


def mutated_json(base: dict, *, text_level: bool = True):
    """Bytes of ``base`` after one structural mutation (a value swapped for any JSON value, a key deleted, an unknown
    key added, or none) and, with ``text_level``, one textual one (truncation, a duplicate key, non-UTF-8 bytes, a
    byte-order mark, deep nesting, NaN, a 5000-digit integer, an empty file, another JSON type)."""
    import copy
    import json as _json

    st = _hypothesis()

    @st.composite
    def build(draw):
        doc = copy.deepcopy(base)
        op = draw(st.sampled_from(["set", "set", "set", "delete", "add", "none"]))
        paths = _paths(doc)
        if op == "set":
            doc = _set(doc, draw(st.sampled_from(paths)), draw(json_values()))
        elif op == "delete":
            deletable = [p for p in paths if p]
            if deletable:
                doc = _delete(doc, draw(st.sampled_from(deletable)))
        elif op == "add" and isinstance(doc, dict):
            doc[draw(st.sampled_from(["extra", "x\x1b", "layer_ids ", "\ud800"]))] = draw(json_values(3))
        text = _json.dumps(doc)
        mutation = draw(st.sampled_from(TEXT_MUTATIONS)) if text_level else "none"
        if mutation == "truncate":
            text = text[:draw(st.integers(0, max(0, len(text) - 1)))]
        elif mutation == "duplicate-key" and isinstance(doc, dict) and doc:
            key = draw(st.sampled_from(sorted(doc, key=str)))
            text = "{" + _json.dumps(key) + ": " + _json.dumps(draw(json_values(3))) + ", " + text[1:]
        elif mutation == "deep":
            depth = draw(st.sampled_from([65, 1000, 100000]))
            text = "[" * depth + text + "]" * depth
        elif mutation == "nan":
            text = text.replace(": 96", ": NaN", 1).replace(": 1", ": Infinity", 1)
        elif mutation == "huge-int":
            huge = "9" * 5000
            text = text.replace(": 96", ": " + huge, 1) if ": 96" in text else text[:-1] + ', "n": ' + huge + "}"
        elif mutation == "empty":
            text = ""
        elif mutation == "not-an-object":
            text = _json.dumps(draw(st.sampled_from([[], [base], "x", 5, None])))
        data = text.encode("utf-8", "surrogatepass")
        if mutation == "non-utf8":
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"])) + data[at:]
        elif mutation == "bom":
            data = b"\xef\xbb\xbf" + data
        return data

    return build()


def fuzz_settings(max_examples: int):
    """The fuzz suite's hypothesis settings: a fixed example budget (scaled by E3C_FUZZ_SCALE), no deadline per example
    (the tests bound each command's time themselves), derandomized so CI runs the same cases every time, no example
    database, no health checks that would fail on slow shared CI machines."""
    from hypothesis import HealthCheck, settings

    scale = float(os.environ.get("E3C_FUZZ_SCALE", "1"))
    return settings(max_examples=max(1, int(max_examples * scale)), deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=True)


_BASE: dict[str, Path] = {}


def shared_base() -> Path:
    """:func:`build_base` once per process, in a world-readable directory removed when the process ends."""
    if "base" not in _BASE:
        import atexit

        root = world_readable_dir("e3c-fuzz-")
        atexit.register(shutil.rmtree, root, True)
        _BASE["base"] = build_base(root / "base")
    return _BASE["base"]
