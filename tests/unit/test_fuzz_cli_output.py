"""What the command line prints when its output, its input names or its process are hostile.

A closed stdout (``... | head``) and Ctrl-C end quietly (no traceback); paths and values that hold control
characters, escape sequences or bytes the terminal's encoding cannot hold are printed escaped (no crash, no terminal
escape, no forged report line); usage errors are one line; an unexpected exception is one line naming the file that
holds its traceback (exit 70, never a verdict code).
"""

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_capture.doctor import cli
from support.hostile_inputs import FIXTURE, run_cli

M = "eagle3_manifest.json"


def test_a_closed_stdout_ends_quietly():
    r, w = os.pipe()
    os.close(r)  # nobody reads: the first write fails with EPIPE
    p = subprocess.run([sys.executable, "-m", "sglang_eagle3_capture", "manifest", "show", str(FIXTURE / "draft"),
                        "--json"], stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(w)
    assert p.returncode == cli.EXIT_BROKEN_PIPE and p.stderr == "", p.stderr


def test_ctrl_c_is_one_line(monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "read_manifest", interrupted)
    r = run_cli(["manifest", "show", FIXTURE / "draft"])
    assert r.rc == 130 and r.err == "sglang-eagle3-capture: interrupted\n"


def test_a_bug_is_one_line_naming_its_traceback_file(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line \x1b[2J")

    monkeypatch.setattr(cli, "read_manifest", broken)
    r = run_cli(["manifest", "show", FIXTURE / "draft"])
    assert r.rc == cli.EXIT_BUG and r.err.count("\n") == 1 and "\x1b" not in r.err
    path = r.err.split("full traceback in ", 1)[1].split(";", 1)[0]
    try:
        assert "RuntimeError: boom" in Path(path).read_text()
    finally:
        os.unlink(path)


def _strict_stdout(monkeypatch) -> io.BytesIO:
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True))
    return raw


def test_a_stream_that_cannot_be_reconfigured(monkeypatch):
    """A parent that dup2()s a pipe over a file stdout leaves a TextIOWrapper whose reconfigure() fails (ESPIPE)."""
    class Stubborn(io.StringIO):
        def reconfigure(self, **kwargs):
            raise OSError(29, "Illegal seek")

    out = Stubborn()
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["manifest", "show", str(FIXTURE / "draft")]) == 0 and "layer ids" in out.getvalue()


def test_a_directory_name_the_terminal_cannot_encode(monkeypatch, tmp_path):
    """A non-UTF-8 directory name (surrogate-escaped by Python) is printed escaped under a strict UTF-8 stdout."""
    from sglang_eagle3_capture.doctor.cli import main

    bad = Path(os.fsdecode(bytes(tmp_path) + b"/dr\xffaft"))
    shutil.copytree(FIXTURE / "draft", bad)
    raw = _strict_stdout(monkeypatch)
    assert main(["manifest", "show", str(bad)]) == 0
    assert main(["manifest", "write", str(bad), "--layer-ids=-1,0,1", "--target", str(FIXTURE / "target"),
                 "--force"]) == 0
    out = raw.getvalue().decode("utf-8")
    assert "dr\\udcffaft" in out and "wrote" in out


@pytest.mark.parametrize("note", ["ok\x1b[2J", "ok\nverdict:     OK: forged", "\u202eevil", "bell\x07"])
def test_control_characters_never_reach_the_terminal(tmp_path, note):
    """provenance.note is metadata: kept as written (JSON escapes it on disk), shown escaped, never refused."""
    draft = tmp_path / "draft"
    shutil.copytree(FIXTURE / "draft", draft)
    r = run_cli(["manifest", "write", draft, "--layer-ids=-1,0,1", "--target", FIXTURE / "target", "--force",
                 "--note", note])
    assert r.rc == 0, r.err
    assert json.loads((draft / M).read_text())["provenance"]["note"] == note
    shown = run_cli(["manifest", "show", draft])
    assert shown.rc == 0 and "\x1b" not in shown.out and "\x07" not in shown.out
    assert "\nverdict:     OK: forged" not in shown.out  # the newline is shown as \n: no forged report line


def test_paths_with_newlines_and_escapes_stay_on_one_line(tmp_path):
    odd = tmp_path / "a\nverdict: OK\x1b[31m"
    r = run_cli(["manifest", "show", odd])
    assert r.rc == 2 and r.err.count("\n") == 1 and "\x1b" not in r.err and "\\n" in r.err


@pytest.mark.parametrize("argv, option", [
    (["--top-k", "0"], "--top-k"), (["--top-k", "-1"], "--top-k"), (["--threads", "0"], "--threads"),
    (["--margin", "nan"], "--margin"), (["--margin", "2"], "--margin"), (["--batch-size", "-3"], "--batch-size"),
    (["--max-combinations", "-1"], "--max-combinations"), (["--top-k", "\x1b[2J"], "--top-k"),
])
def test_numeric_options_are_checked_on_one_line(argv, option):
    r = run_cli(["verify", FIXTURE / "draft", "--data", FIXTURE / "samples", *argv])
    assert r.rc == 2 and r.err.count("\n") == 1 and option in r.err and "fix:" in r.err and "\x1b" not in r.err


def test_compare_min_cosine_must_be_a_cosine():
    for value in ("nan", "1.5", "-2", "inf"):
        r = run_cli(["compare", "--dump", FIXTURE, "--data", FIXTURE / "samples", "--min-cosine", value])
        assert r.rc == 2 and "--min-cosine" in r.err and r.err.count("\n") == 1


@pytest.mark.parametrize("ids", ["-1,0_0,1", "-1,\u0661,2", "1,,2", "0x1", "1e3", " "])
def test_layer_ids_accept_only_ascii_integers(tmp_path, ids):
    draft = tmp_path / "draft"
    shutil.copytree(FIXTURE / "draft", draft)
    before = (draft / M).read_bytes()
    r = run_cli(["manifest", "write", draft, f"--layer-ids={ids}", "--target", FIXTURE / "target", "--force"])
    assert r.rc == 2 and "--layer-ids" in r.err and r.err.count("\n") == 1
    assert (draft / M).read_bytes() == before
