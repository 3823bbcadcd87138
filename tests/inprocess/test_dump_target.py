"""observe/dump.py on the installed SGLang's own DeepSeek-V3 (in-process ModelRunner): what it writes is exactly what
the target feeds the draft, under the capture patch and under stock wiring."""

import json
import os
from importlib import metadata

import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.core.sglang import target
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds
from sglang_eagle3_capture.observe.dump import ENV_DIR, ENV_MAX_BATCHES, ENV_MAX_BYTES

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]


def _batches(directory):
    stems = sorted(p.stem for p in directory.glob("*.safetensors"))
    return [(load_file(str(directory / f"{s}.safetensors")), json.loads((directory / f"{s}.json").read_text()))
            for s in stems]


def test_dump_is_exactly_what_the_target_feeds_the_draft(runner, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    monkeypatch.setenv(ENV_MAX_BATCHES, "2")
    with target.patched():
        runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds([3, -1, 1], "test manifest"))
        try:
            outs = [runner.prefill(PROMPTS), runner.prefill(PROMPTS[::-1]), runner.prefill(PROMPTS)]
        finally:
            runner.reset_capture()
    got = _batches(tmp_path)
    assert len(got) == 2  # bounded
    for (saved, meta), out in zip(got, outs):
        assert torch.equal(saved["aux_hidden_states"], out.aux)  # after the fc-order permutation
        assert saved["input_ids"].tolist() == sum(out.prompts, [])
        assert saved["positions"].tolist() == sum([list(range(len(p))) for p in out.prompts], [])
        assert (meta["layer_ids"] == [3, -1, 1] and meta["loop_indices"] == [0, 2, 4]
                and meta["chunk_order"] == [2, 0, 1])
        assert meta["source"] == "test manifest" and meta["tp_rank"] == 0 and meta["pid"] == os.getpid()
        # the release that ran, read here from the distribution's metadata (not a pinned "0.5.23", nor the table's
        # newest: adding a newer release file must break no test)
        assert meta["sglang_version"] == metadata.version("sglang")
        assert meta["forward_mode"] == "EXTEND"
        assert meta["model_class"] == "DeepseekV3ForCausalLM"


def test_stock_wiring_is_dumped_too(runner, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    with target.patched():
        runner.model.set_eagle3_layers_to_capture([0, 2, 4])  # plain list: stock SGLang decides
        try:
            out = runner.prefill(PROMPTS[:1])
        finally:
            runner.reset_capture()
    ((saved, meta),) = _batches(tmp_path)
    assert torch.equal(saved["aux_hidden_states"], out.aux)
    assert meta["loop_indices"] == [0, 2, 4] and meta["layer_ids"] == [-1, 1, 3]
    assert meta["source"] == "stock SGLang set_eagle3_layers_to_capture"


def test_a_bad_bound_turns_the_dump_off_and_serving_goes_on(runner, tmp_path, monkeypatch, caplog):
    # a side feature never stops the server: configure (declared ids and stock wiring alike) logs one ERROR per
    # configuration, names the variable and the fix, and the forward runs without a dump
    monkeypatch.setenv(ENV_DIR, str(tmp_path / "dump"))
    monkeypatch.setenv(ENV_MAX_BYTES, "64MiB")
    with target.patched():
        for ids in (DeclaredLayerIds([3, -1, 1], "test manifest"), [0, 2, 4]):
            runner.model.set_eagle3_layers_to_capture(ids)
            try:
                assert runner.prefill(PROMPTS[:1]).aux is not None
            finally:
                runner.reset_capture()
    assert not (tmp_path / "dump").exists()
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 2 and all(f"{ENV_MAX_BYTES}='64MiB'" in m and "fix:" in m for m in errors)
