"""userfiles: a path that cannot be looked at keeps the caller's fix; a temp-dir pid is ASCII digits only."""

import errno
import os

import pytest

from sglang_eagle3_capture.errors import InputError
from sglang_eagle3_capture.userfiles import OWNER_FILE, TEMP_DIR_PREFIX, host_tag, path_kind, stale_temp_dirs


def _denied(monkeypatch, path):
    real = os.stat

    def stat(p, *a, **k):
        if os.fspath(p) == os.fspath(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))
        return real(p, *a, **k)

    monkeypatch.setattr(os, "stat", stat)


def test_a_path_that_cannot_be_looked_at_names_the_callers_fix(tmp_path, monkeypatch):
    p = tmp_path / "x"
    _denied(monkeypatch, p)
    with pytest.raises(InputError) as e:
        path_kind(p, fix="choose a new DST")
    msg = str(e.value)
    assert msg.startswith(f"{p}: field '<file>': cannot be looked at (permission denied)")
    assert "readable by this user" in msg and msg.endswith("or choose a new DST")


def test_without_a_fix_the_os_problem_gives_it(tmp_path, monkeypatch):
    p = tmp_path / "x"
    _denied(monkeypatch, p)
    with pytest.raises(InputError, match=r"; fix: make it \(and the directories above it\) readable by this user$"):
        path_kind(p)


def test_stale_temp_dirs_skips_non_ascii_digit_pids(tmp_path):
    # the owner file is read as ASCII, so it can never match such a pid: the isascii() test only makes this explicit
    d = tmp_path / f"{TEMP_DIR_PREFIX}{host_tag()}.\u00b2\u00b3.abc"
    d.mkdir()
    (d / OWNER_FILE).write_text(f"{host_tag()} \u00b2\u00b3\n")
    assert stale_temp_dirs(tmp_path) == []
