"""observe/dump.py without SGLang: off by default, bounded, and what it writes is what it is handed.

That it writes exactly what the target feeds the draft is checked on SGLang's own model in
tests/inprocess/test_dump_target.py.
"""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture import __version__
from sglang_eagle3_capture.observe.dump import ENV_DIR, ENV_MAX_BATCHES, ENV_MAX_BYTES, CaptureDump, dump_from_env


def _batches(directory):
    stems = sorted(p.stem for p in directory.glob("*.safetensors"))
    return [(load_file(str(directory / f"{s}.safetensors")), json.loads((directory / f"{s}.json").read_text()))
            for s in stems]


def test_unset_means_no_dump_object():
    assert dump_from_env({"tp_rank": 0}, environ={}) is None
    assert dump_from_env({"tp_rank": 0}, environ={ENV_DIR: "  "}) is None


@pytest.mark.parametrize("name", [ENV_MAX_BATCHES, ENV_MAX_BYTES])
@pytest.mark.parametrize("value", ["0", "-3", "four"])
def test_bad_bounds_turn_the_dump_off_naming_the_variable_and_fix(tmp_path, caplog, name, value):
    # a side feature never stops serving: no raise at configure time (stock wiring included), one ERROR, no dump
    assert dump_from_env({}, environ={ENV_DIR: str(tmp_path / "d"), name: value}) is None
    (err,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert f"{name}={value!r}" in err.getMessage() and "fix:" in err.getMessage()
    assert not (tmp_path / "d").exists()  # turned off before anything was created


def test_count_bound(tmp_path):
    dump = dump_from_env({"tp_rank": 3}, environ={ENV_DIR: str(tmp_path), ENV_MAX_BATCHES: "2"})
    tensors = [torch.randn(4, 6) for _ in range(3)]
    for t in tensors:
        dump(t, torch.arange(4), torch.arange(4))
    got = _batches(tmp_path)
    assert len(got) == 2 and dump.done
    for (saved, meta), t, n in zip(got, tensors, range(2)):
        assert torch.equal(saved["aux_hidden_states"], t) and torch.equal(saved["input_ids"], torch.arange(4))
        assert meta["batch"] == n and meta["tp_rank"] == 3 and meta["pid"] == os.getpid()
        assert meta["shapes"]["aux_hidden_states"] == [4, 6] and meta["package_version"] == __version__


def test_size_bound_skips_batches_that_would_overflow(tmp_path, caplog):
    # 8 rows x 6 fp32 aux + 2 x 8 int64 = 192 + 128 = 320 bytes per batch
    dump = CaptureDump(tmp_path, metadata={"tp_rank": 0}, max_batches=10, max_bytes=500)
    for _ in range(3):
        dump(torch.randn(8, 6), torch.arange(8), torch.arange(8))
    dump(torch.randn(1, 6), torch.arange(1), torch.arange(1))  # 24 + 16 = 40 bytes still fits
    assert len(_batches(tmp_path)) == 2 and dump.bytes_written == 360
    assert any(ENV_MAX_BYTES in r.getMessage() for r in caplog.records)


# --- a failing dump never stops serving: one ERROR naming the directory and the fix, then it is off ---


def _errors(caplog):
    return [r for r in caplog.records if r.levelname == "ERROR"]


def test_a_directory_that_cannot_be_created_turns_the_dump_off(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    dump = dump_from_env({"tp_rank": 0}, environ={ENV_DIR: str(blocker / "dump")})
    assert dump is None  # nothing to call: the forward runs as without the dump
    (err,) = _errors(caplog)
    assert str(blocker / "dump") in err.getMessage() and "fix:" in err.getMessage() and ENV_DIR in err.getMessage()


@pytest.mark.parametrize("breakage", ["removed", "replaced by a file"])
def test_a_batch_that_cannot_be_written_turns_the_dump_off(tmp_path, caplog, breakage):
    d = tmp_path / "dump"
    dump = CaptureDump(d, metadata={"tp_rank": 0}, max_batches=5)
    dump(torch.randn(2, 6), torch.arange(2), torch.arange(2))
    for p in d.iterdir():
        p.unlink()
    d.rmdir()
    if breakage == "replaced by a file":
        d.write_text("not a directory")
    for _ in range(3):  # never raises into the forward; one ERROR, then silence
        dump(torch.randn(2, 6), torch.arange(2), torch.arange(2))
    (err,) = _errors(caplog)
    assert dump.disabled and dump.done and str(d) in err.getMessage() and "fix:" in err.getMessage()
    # the reason is the write error's problem part: the directory and a fix once each, not a whole nested line
    assert err.getMessage().count(str(d)) == 1 and err.getMessage().count("fix:") == 1, err.getMessage()


def test_two_runs_with_one_pid_never_overwrite_each_other(tmp_path):
    for ids in ([-1, 0, 1], [5, 6, 7]):  # two server runs in one dump directory, same pid
        dump = CaptureDump(tmp_path, metadata={"tp_rank": 0, "layer_ids": ids}, max_batches=2)
        for _ in range(2):
            dump(torch.ones(2, 6), torch.zeros(2, dtype=torch.long), torch.arange(2))
    metas = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.json"))]
    assert len(metas) == 4 and sorted(m["layer_ids"][0] for m in metas) == [-1, -1, 5, 5]
    assert len({m["run"] for m in metas}) == 2


def test_dump_files_are_whole_and_follow_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        dump = CaptureDump(tmp_path / "d", metadata={"tp_rank": 0}, max_batches=1)
        dump(torch.ones(2, 6), torch.zeros(2, dtype=torch.long), torch.arange(2))
    finally:
        os.umask(old)
    files = sorted((tmp_path / "d").iterdir())
    assert [p.suffix for p in files] == [".json", ".safetensors"]  # no temporary left behind
    assert all(p.stat().st_mode & 0o777 == 0o640 for p in files)
