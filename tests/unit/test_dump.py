"""serving/dump.py without SGLang: off by default, bounded, and what it writes is what it is handed.

That it writes exactly what the target feeds the draft is checked on SGLang's own model in
tests/inprocess/test_dump_target.py.
"""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture import __version__
from sglang_eagle3_capture.errors import DumpConfigError
from sglang_eagle3_capture.serving.dump import ENV_DIR, ENV_MAX_BATCHES, ENV_MAX_BYTES, CaptureDump, dump_from_env


def _batches(directory):
    stems = sorted(p.stem for p in directory.glob("*.safetensors"))
    return [(load_file(str(directory / f"{s}.safetensors")), json.loads((directory / f"{s}.json").read_text()))
            for s in stems]


def test_unset_means_no_dump_object():
    assert dump_from_env({"tp_rank": 0}, environ={}) is None
    assert dump_from_env({"tp_rank": 0}, environ={ENV_DIR: "  "}) is None


@pytest.mark.parametrize("name", [ENV_MAX_BATCHES, ENV_MAX_BYTES])
@pytest.mark.parametrize("value", ["0", "-3", "four"])
def test_bad_bounds_name_the_variable_and_fix(tmp_path, name, value):
    with pytest.raises(DumpConfigError) as e:
        dump_from_env({}, environ={ENV_DIR: str(tmp_path), name: value})
    assert f"{name}={value!r}" in str(e.value) and "fix:" in str(e.value)


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
