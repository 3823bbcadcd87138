"""Hostile input, round 2 (issue 21, part 4): the command line's own classes of failure, one table per class.

1. Where the output goes never decides the verdict: every subcommand, through a real ``python -m
   sglang_eagle3_capture`` process, exits as it does with plain pipes under ``>/dev/full``, ``2>/dev/full``, ``>&-``,
   ``2>&-`` and both; with stderr closed no error line lands on stdout (``--json`` stays JSON).
2. One line that keeps its point: third-party warnings never stand before the error line; a long path (a
   5,000-character component, a ~4,000-character path), a long key or a long architecture name never pushes out
   the field and the fix.
3. Paths into metadata: a non-UTF-8 directory name, or a non-ASCII one under an ASCII locale, converts, and the
   manifest it writes reads back.
4. Leftovers and blame: SIGTERM during ``convert`` leaves no temporary directory; a mount point as DST gets a fix
   that can be applied; a bound only the manifest applies is blamed on the target config; ``--trained-with`` where
   nothing reads it is refused.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.manifest import read_manifest
from sglang_eagle3_capture.core.userfiles import TEMP_DIR_PREFIX
from sglang_eagle3_capture.doctor import cli
from sglang_eagle3_capture.doctor.convert import convert
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support import REPO
from support.hostile_inputs import FIXTURE, VFLAGS, run_cli
from support.speculators_drafts import build_specforge_draft, write_target

PROG = "sglang-eagle3-capture"


def sh(argv, redirect: str = "", *, env=None, cwd=REPO) -> subprocess.CompletedProcess:
    """``python -m sglang_eagle3_capture ARGV REDIRECT`` in a real process (``sh`` applies the redirection)."""
    return subprocess.run(["sh", "-c", f'exec "$0" -m sglang_eagle3_capture "$@" {redirect}', sys.executable,
                           *map(str, argv)], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    b = tmp_path_factory.mktemp("round2")
    shutil.copytree(FIXTURE / "draft", b / "draft")
    build_specforge_draft(b / "sf")
    write_target(b / "kimi")
    return b


# --- 1. where the output goes --------------------------------------------------------------------------------------

REDIRECTS = [">/dev/full", "2>/dev/full", ">&-", "2>&-", ">&- 2>&-", ">/dev/full 2>/dev/full"]
TARGET = FIXTURE / "target"
# (id, argv from (base, a fresh name), imports torch)
COMMANDS = [
    ("show", lambda b, n: ["manifest", "show", b / "draft"], False),
    ("show --json", lambda b, n: ["manifest", "show", b / "draft", "--json"], False),
    ("show missing", lambda b, n: ["manifest", "show", b / "nothing"], False),
    ("write", lambda b, n: ["manifest", "write", b / "draft", "--layer-ids=-1,0,1", "--target", TARGET, "--force"],
     False),
    ("write bad ids", lambda b, n: ["manifest", "write", b / "draft", "--layer-ids=-1,0,99", "--target", TARGET],
     False),
    ("inspect --json", lambda b, n: ["inspect", b / "draft", "--json"], False),
    ("inspect missing --json", lambda b, n: ["inspect", b / "nothing", "--json"], False),
    ("usage", lambda b, n: ["convert"], False),
    ("help", lambda b, n: ["--help"], False),
    ("convert", lambda b, n: ["convert", b / "sf", b / f"out-{n}", "--target", b / "kimi"], True),
    ("convert missing", lambda b, n: ["convert", b / "nothing", b / f"out-{n}", "--target", b / "kimi"], False),
    ("verify", lambda b, n: ["verify", b / "draft", "--data", FIXTURE / "samples", *VFLAGS, "--json"], True),
    ("verify missing data", lambda b, n: ["verify", b / "draft", "--data", b / "nothing", *VFLAGS, "--json"], True),
    ("compare missing dump", lambda b, n: ["compare", "--dump", b / "nothing", "--data", FIXTURE / "samples",
                                           "--json"], True),
]


QUICK = {"show --json", "write", "inspect missing --json"}  # make quick runs these; the fuzz tier every command


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0], marks=[] if c[0] in QUICK else [pytest.mark.fuzz])
                                  for c in COMMANDS])
def test_where_the_output_goes_never_decides_the_exit_status(case, base):
    name, argv, _ = case
    plain = sh(argv(base, "plain"))
    assert "Traceback" not in plain.stderr and plain.returncode != cli.EXIT_BUG, plain.stderr
    for i, redirect in enumerate(REDIRECTS):
        r = sh(argv(base, str(i)), redirect)
        assert r.returncode == plain.returncode, (redirect, r.returncode, plain.returncode, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr, (redirect, r.stderr)
        if redirect.startswith("2>") and "--json" in map(str, argv(base, "")):  # stdout still a pipe
            if plain.stdout:  # the same document (verify's timings differ from run to run)
                assert json.loads(r.stdout).keys() == json.loads(plain.stdout).keys(), redirect
        if redirect.startswith("2>"):
            assert "error:" not in r.stdout and "fix:" not in r.stdout, (redirect, r.stdout[-300:])
        if "2>" not in redirect and plain.stderr:  # stderr still a pipe: the same error line, at most a note more
            assert lines(plain.stderr)[-1] in r.stderr, (redirect, r.stderr)
        if name == "write":
            assert read_manifest(base / "draft").layer_ids == (-1, 0, 1)


@pytest.mark.fuzz  # a real process (or speculators' draft): the full suite, not make quick
def test_a_full_stdout_is_named_once_on_stderr(base):
    r = sh(["manifest", "show", base / "draft", "--json"], ">/dev/full")
    assert r.returncode == 0 and len(lines(r.stderr)) == 1 and "stdout" in r.stderr and "no space" in r.stderr


# --- 2. one line that keeps its point ------------------------------------------------------------------------------


def test_third_party_warnings_never_precede_the_error_line(monkeypatch):
    def noisy(*args, **kwargs):
        warnings.warn("a library's multi-line\nwarning", UserWarning)
        import logging

        logging.getLogger("somelib").warning("a library's log record")
        raise InputError("draft/eagle3_manifest.json", "layer_ids", "bad", "write it again")

    monkeypatch.setattr(cli, "read_manifest", noisy)
    r = run_cli(["manifest", "show", FIXTURE / "draft"])
    assert r.rc == 2 and len(lines(r.err)) == 1 and r.err.startswith(f"{PROG}: error:"), r.err


def test_warnings_after_a_report_are_one_line_each(monkeypatch):
    real = cli.read_manifest

    def noisy(*args, **kwargs):
        warnings.warn("a library's multi-line\nwarning \x1b[2J", UserWarning)
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "read_manifest", noisy)
    r = run_cli(["manifest", "show", FIXTURE / "draft"])
    assert r.rc == 0 and "layer ids" in r.out
    assert lines(r.err) == [f"{PROG}: warning: UserWarning: a library's multi-line\\nwarning \\x1b[2J"]


@pytest.mark.fuzz  # a real process (or speculators' draft): the full suite, not make quick
def test_torch_warnings_from_a_sparse_sample_never_precede_the_error_line(tmp_path):
    """torch prints two multi-line UserWarnings while it loads a sparse CSR tensor; the error line stays alone."""
    import torch

    d = torch.load(FIXTURE / "samples" / "data_0.pt", weights_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d["hidden_states"] = [h.to_sparse_csr() for h in d["hidden_states"]]
    (tmp_path / "s").mkdir()
    torch.save(d, tmp_path / "s" / "data_0.pt")
    r = sh(["verify", FIXTURE / "draft", "--data", tmp_path / "s", *VFLAGS])
    assert r.returncode != 0 and len(lines(r.stderr)) == 1 and r.stderr.startswith(f"{PROG}:"), r.stderr


def _nested(root: Path, total: int) -> Path:
    """A directory about ``total`` characters long under ``root``, made of 200-character components."""
    p = root
    while len(str(p)) < total - 201:
        p = p / ("d" * 200)
    p.mkdir(parents=True)
    return p


def _keeps_its_point(r, field: str) -> None:
    assert r.rc == 2 and len(lines(r.err)) == 1 and len(r.err) < 4096, r.err[:400]
    assert f"field '{field}" in r.err, r.err[:400]
    fix = r.err.split("; fix: ", 1)[1]
    assert len(fix.strip()) > 10 and "... (" not in fix, fix[:300]


LONG = "x" * 5000


def _long_cases(tmp_path: Path):
    """(id, argv, field) over every command that reads a path, a key or an architecture name."""
    deep = _nested(tmp_path / "deep", 3900)
    shutil.copytree(FIXTURE / "draft", deep / "draft")
    (deep / "draft" / "eagle3_manifest.json").unlink()
    arch = tmp_path / "arch"
    write_target(arch, architecture="DeepseekV3ForCausalLM", num_hidden_layers=7, hidden_size=96)
    cfg = json.loads((arch / "config.json").read_text())
    cfg["architectures"] = [LONG]
    (arch / "config.json").write_text(json.dumps(cfg))
    key = tmp_path / "key"
    shutil.copytree(FIXTURE / "draft", key)
    m = json.loads((key / "eagle3_manifest.json").read_text())
    m[LONG] = 1
    (key / "eagle3_manifest.json").write_text(json.dumps(m))
    component = tmp_path / LONG
    return [
        ("5000-char component show", ["manifest", "show", component], "<file>"),
        ("5000-char component inspect", ["inspect", component, "--target", TARGET], "<file>"),
        ("5000-char component write", ["manifest", "write", component, "--layer-ids=-1", "--target", TARGET],
         "<file>"),
        ("5000-char component convert", ["convert", component, tmp_path / "o1", "--target", TARGET], "<file>"),
        ("5000-char component verify", ["verify", FIXTURE / "draft", "--data", component, *VFLAGS], "<file>"),
        ("deep path show", ["manifest", "show", deep / "draft"], "<file>"),
        ("deep path write bad ids", ["manifest", "write", deep / "draft", "--layer-ids=-1,0,99", "--target",
                                     TARGET], "layer_ids"),
        ("long key", ["manifest", "show", key], "x" * 50),
        ("long architecture write", ["manifest", "write", tmp_path / "key", "--layer-ids=-1", "--target", arch,
                                     "--force"], "architectures"),
        ("long architecture convert", ["convert", tmp_path / "nothing-here", tmp_path / "o2", "--target", arch],
         "<file>"),
    ]


def test_long_paths_keys_and_architectures_keep_the_field_and_the_fix(tmp_path):
    for case_id, argv, field in _long_cases(tmp_path):
        r = run_cli(argv)
        try:
            _keeps_its_point(r, field[:60])
        except AssertionError as e:
            raise AssertionError(f"{case_id}: {e}") from None


# --- 3. paths into metadata ----------------------------------------------------------------------------------------


def test_a_non_utf8_directory_name_converts_and_reads_back(base, tmp_path):
    src = Path(os.fsdecode(os.fsencode(tmp_path) + b"/dr\xffaft"))
    shutil.copytree(base / "sf", src)
    report = convert(src, tmp_path / "out", target=base / "kimi")
    m = read_manifest(tmp_path / "out")  # JSON readers refuse lone surrogates: provenance must hold none
    assert m.layer_ids == report.manifest.layer_ids and m.provenance["file"].endswith("dr\\xffaft/config.json")
    dst = Path(os.fsdecode(os.fsencode(tmp_path) + b"/out\xfe"))
    convert(src, dst, target=base / "kimi")
    assert read_manifest(dst).layer_ids == m.layer_ids


@pytest.mark.fuzz  # a real process (or speculators' draft): the full suite, not make quick
def test_an_ascii_locale_converts_a_non_ascii_path(base, tmp_path):
    src = tmp_path / "modèle" / "draft"
    shutil.copytree(base / "sf", src)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_CTYPE")}
    env.update(LC_ALL="C", PYTHONUTF8="0")
    r = sh(["convert", src, tmp_path / "out", "--target", base / "kimi"], env=env)
    assert r.returncode == 0, r.stderr
    assert read_manifest(tmp_path / "out").provenance["file"] == str((src / "config.json").resolve())
    r = sh(["manifest", "write", tmp_path / "out", "--layer-ids=1,29,57", "--target", base / "kimi", "--force",
            "--note", "écrit à la main"], env=env)
    assert r.returncode == 0, r.stderr
    assert read_manifest(tmp_path / "out").provenance["note"] == "écrit à la main"


# --- 4. leftovers and blame ----------------------------------------------------------------------------------------

_SLOW_CONVERT = r"""
import sys, time
from pathlib import Path
from sglang_eagle3_capture.doctor import cli
from sglang_eagle3_capture.doctor import convert
real = convert.finish_file
def slow(path, **kw):
    real(path, **kw)
    Path(sys.argv[1]).write_text("ready")
    time.sleep(60)
convert.finish_file = slow
sys.exit(cli.main(sys.argv[2:]))
"""


@pytest.mark.fuzz  # a real process: the full suite, not make quick
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_convert_leaves_no_temporary_directory(base, tmp_path, signum):
    out = tmp_path / "parent"
    out.mkdir()
    ready = tmp_path / "ready"
    # the signal's default disposition in the child: under nohup (SIGHUP ignored) the CLI rightly keeps it ignored
    p = subprocess.Popen([sys.executable, "-c", _SLOW_CONVERT, str(ready), "convert", str(base / "sf"),
                          str(out / "dst"), "--target", str(base / "kimi")], cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not ready.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), p.communicate()
    assert [n for n in os.listdir(out) if n.startswith(TEMP_DIR_PREFIX)]  # the partial copy is there now
    p.send_signal(signum)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 128 + signum and lines(stderr) == [f"{PROG}: terminated ({signum.name})"], stderr
    assert os.listdir(out) == []


def test_a_mount_point_dst_gets_a_fix_that_applies(base, tmp_path, monkeypatch):
    dst = tmp_path / "mnt"
    dst.mkdir()
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == dst)
    r = run_cli(["convert", base / "sf", dst, "--target", base / "kimi"])
    assert r.rc == 2 and "field 'DST'" in r.err and str(dst / "draft") in r.err.split("fix: ", 1)[1], r.err
    monkeypatch.undo()
    r = run_cli(["convert", base / "sf", dst / "draft", "--target", base / "kimi"])  # the fix, applied
    assert r.rc == 0, r.err


def test_rename_ebusy_gets_a_fix_that_applies_and_leaves_nothing(base, tmp_path, monkeypatch):
    from sglang_eagle3_capture.core import userfiles

    def busy(a, b):
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr(userfiles.os, "rename", busy)
    r = run_cli(["convert", base / "sf", tmp_path / "mnt", "--target", base / "kimi"])
    monkeypatch.undo()
    assert r.rc == 2 and "new directory inside it" in r.err and str(tmp_path / "mnt" / "draft") in r.err, r.err
    assert os.listdir(tmp_path) == []


def _huge_target(tmp_path: Path, **dims) -> Path:
    return write_target(tmp_path / "huge", **dims) / "config.json"


@pytest.mark.parametrize("dims,field", [
    ({"num_hidden_layers": 200_000}, "text_config.num_hidden_layers"),
    ({"hidden_size": 1 << 21}, "text_config.hidden_size"),
    ({"num_hidden_layers": 200_000, "architecture": "DeepseekV3ForCausalLM"}, "num_hidden_layers"),
])
def test_a_manifest_bound_is_blamed_on_the_target_config(base, tmp_path, dims, field):
    target = _huge_target(tmp_path, **dims)
    for run in (lambda: convert(base / "sf", tmp_path / "out", target=target),
                lambda: write_draft_manifest(FIXTURE / "draft", [-1, 0, 1], target, force=True)):
        with pytest.raises(InputError) as e:
            run()
        assert (e.value.file, e.value.field) == (str(target), field) and e.value.fix
    assert not (tmp_path / "out").exists()


@pytest.mark.fuzz  # a real process (or speculators' draft): the full suite, not make quick
def test_trained_with_where_nothing_reads_it_is_refused(base, tmp_path, speculators_draft, kimi_target):
    r = run_cli(["inspect", base / "draft", "--trained-with", "layer-output"])
    assert r.rc == 2 and "field '--trained-with'" in r.err and "fix:" in r.err, r.err
    with pytest.raises(InputError) as e:
        convert(speculators_draft, tmp_path / "o1", target=kimi_target, trained_with="layer-output")
    assert e.value.field == "--trained-with" and e.value.fix
    src = tmp_path / "sf"
    shutil.copytree(base / "sf", src)
    write_draft_manifest(src, [1, 29, 57], base / "kimi")
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "o2", target=base / "kimi", trained_with="layer-output")
    assert e.value.field == "--trained-with" and e.value.fix
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
