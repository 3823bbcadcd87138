"""userfiles: strict JSON through json's own limits and hooks, bounded reads that never block, one error in four
parts, atomic writes whose modes come from the kernel (no /proc, no umask change)."""

import builtins
import errno
import json
import os
import signal
import stat

import pytest

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.userfiles import (
    TEMP_DIR_PREFIX,
    atomic_directory,
    finish_file,
    parse_json,
    path_kind,
    read_bytes,
    read_json_object,
    write_file_atomic,
)


def _parse_error(text):
    with pytest.raises(InputError) as e:
        parse_json(text.encode() if isinstance(text, str) else text, where="doc.json", fix="rewrite it")
    assert e.value.file == "doc.json" and e.value.fix.endswith("rewrite it")
    return e.value


# --- what json.loads does on its own (userfiles relies on it: no depth pre-scan, no integer-size hook) --------------


def test_json_loads_raises_recursion_error_for_deep_nesting():
    with pytest.raises(RecursionError):
        json.loads("[" * 100000)


def test_json_loads_raises_value_error_for_a_5000_digit_integer():
    with pytest.raises(ValueError) as e:
        json.loads("1" * 5000)
    assert not isinstance(e.value, json.JSONDecodeError)


@pytest.mark.parametrize("text", ["[" * 100000, '{"a": ' * 100000, "1" * 5000, '{"version": ' + "9" * 5000 + "}"])
def test_deep_nesting_and_huge_integers_become_an_input_error(text):
    assert _parse_error(text).field == "<document>"


# --- the hooks --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, field", [
    ('{"a": 1, "b": {"c": 2, "c": 3}}', "c"),
    ('{"a": NaN}', "<document>"),
    ('{"a": [Infinity]}', "<document>"),
    ('{"a": -Infinity}', "<document>"),
    ('{"a": 1e999}', "<document>"),
    ('{"a": "\\ud800"}', "<document>"),
    ('{"\\udfff": 1}', "<document>"),
    ('{"a": 1', "<document>"),
])
def test_refused_documents_name_the_file_and_field(text, field):
    assert _parse_error(text).field == field


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf{}", b'{"a": "\xff"}'])
def test_a_byte_order_mark_and_non_utf8_are_refused(data):
    assert _parse_error(data).field == "<document>"


def test_what_looks_like_a_surrogate_but_is_not_one_is_read():
    assert parse_json(b'{"pair": "\\ud83d\\ude00", "escaped": "\\\\ud800"}', where="x", fix="f") == {
        "pair": "\U0001f600", "escaped": "\\ud800"}
    assert parse_json(b'{"n": 12345678901234567890123456789012345678901234567890, "x": 1.5e300}', where="x",
                      fix="f") == {"n": 12345678901234567890123456789012345678901234567890, "x": 1.5e300}


def test_read_json_object_refuses_a_list(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("[1]")
    with pytest.raises(InputError) as e:
        read_json_object(p, fix="point at the object")
    assert (e.value.file, e.value.field, e.value.fix) == (str(p), "<document>", "point at the object")


# --- reading the file ------------------------------------------------------------------------------------------------


def test_a_fifo_is_named_and_never_opened(tmp_path):
    p = tmp_path / "fifo"
    os.mkfifo(p)  # opening it for reading would block: the test would hang
    with pytest.raises(InputError) as e:
        read_bytes(p, fix="pass a file")
    assert (e.value.file, e.value.field) == (str(p), "<file>") and "fifo" in e.value.problem


def test_a_file_over_the_bound_is_refused(tmp_path):
    p = tmp_path / "big.json"
    p.write_bytes(b" " * 101)
    with pytest.raises(InputError) as e:
        read_bytes(p, fix="smaller", max_bytes=100)
    assert (e.value.file, e.value.field, e.value.fix) == (str(p), "<file>", "smaller")
    assert read_bytes(p, fix="smaller", max_bytes=101) == b" " * 101


def _denied(monkeypatch, path):
    real = os.stat

    def stat_(p, *a, **k):
        if os.fspath(p) == os.fspath(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(p))
        return real(p, *a, **k)

    monkeypatch.setattr(os, "stat", stat_)


def test_a_path_that_cannot_be_looked_at_names_the_callers_fix(tmp_path, monkeypatch):
    p = tmp_path / "x"
    _denied(monkeypatch, p)
    with pytest.raises(InputError) as e:
        path_kind(p, fix="choose a new DST")
    assert (e.value.file, e.value.field) == (str(p), "<file>") and "permission denied" in e.value.problem
    assert "readable by this user" in e.value.fix and e.value.fix.endswith("or choose a new DST")


def test_without_a_fix_the_os_problem_gives_it(tmp_path, monkeypatch):
    p = tmp_path / "x"
    _denied(monkeypatch, p)
    with pytest.raises(InputError) as e:
        path_kind(p)
    assert e.value.fix == "make it (and the directories above it) readable by this user"


# --- writing ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def no_umask_reads(monkeypatch):
    """The writers must neither change the umask (not thread-safe) nor read it from /proc."""
    real_open = builtins.open

    def no_proc(file, *a, **k):
        assert not os.fspath(file).startswith("/proc"), file
        return real_open(file, *a, **k)

    def no_umask(mask):
        raise AssertionError("os.umask called")

    old = os.umask(0o027)
    monkeypatch.setattr(builtins, "open", no_proc)
    monkeypatch.setattr(os, "umask", no_umask)
    yield 0o027
    monkeypatch.undo()
    os.umask(old)


def test_modes_come_from_the_kernel(tmp_path, no_umask_reads):
    mask = no_umask_reads
    assert stat.S_IMODE(write_file_atomic(tmp_path / "a.json", "{}").stat().st_mode) == 0o666 & ~mask
    with atomic_directory(tmp_path / "out") as tmp:
        lib = tmp / "model.safetensors"
        os.close(os.open(lib, os.O_CREAT | os.O_WRONLY, 0o600))  # as safetensors.save_file creates it
        finish_file(lib)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((tmp_path / "out" / "model.safetensors").stat().st_mode) == 0o666 & ~mask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "out"]  # no probe or temporary left
    assert os.listdir(tmp_path / "out") == ["model.safetensors"]


def test_writing_over_a_directory_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(InputError) as e:
        write_file_atomic(tmp_path / "d", "{}")
    assert (e.value.file, e.value.field) == (str(tmp_path / "d"), "<file>") and e.value.fix


def _temp_dirs(parent):
    return [p.name for p in parent.iterdir() if p.name.startswith(TEMP_DIR_PREFIX)]


def test_a_failure_inside_atomic_directory_removes_its_temporary_directory(tmp_path):
    with pytest.raises(KeyError):
        with atomic_directory(tmp_path / "out") as tmp:
            (tmp / "half.json").write_text("{")
            raise KeyError("a failure half way")
    assert _temp_dirs(tmp_path) == [] and not (tmp_path / "out").exists()


def test_an_exception_raised_by_sigterm_removes_the_temporary_directory(tmp_path):
    class Terminated(Exception):
        pass

    def on_term(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        with pytest.raises(Terminated):
            with atomic_directory(tmp_path / "out") as tmp:
                (tmp / "half.json").write_text("{")
                os.kill(os.getpid(), signal.SIGTERM)
                signal.pause()  # not reached: the handler raises first
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert _temp_dirs(tmp_path) == [] and not (tmp_path / "out").exists()


def test_a_directory_this_call_did_not_create_is_never_removed(tmp_path):
    other = tmp_path / f"{TEMP_DIR_PREFIX}someone-else"
    other.mkdir()
    with pytest.raises(KeyError):
        with atomic_directory(tmp_path / "out"):
            raise KeyError
    with atomic_directory(tmp_path / "out2") as tmp:
        (tmp / "x").write_text("1")
    assert _temp_dirs(tmp_path) == [other.name] and (tmp_path / "out2" / "x").read_text() == "1"


def test_a_destination_that_gained_files_is_refused_and_nothing_remains(tmp_path):
    dst = tmp_path / "out"
    with pytest.raises(InputError) as e:
        with atomic_directory(dst) as tmp:
            (tmp / "mine").write_text("1")
            dst.mkdir()
            (dst / "theirs").write_text("2")
    assert (e.value.file, e.value.field) == (str(dst), "<dir>") and e.value.fix
    assert os.listdir(dst) == ["theirs"] and _temp_dirs(tmp_path) == []
