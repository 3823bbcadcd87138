"""A failing capture dump never stops serving, on the installed SGLang's own DeepSeek-V3 (in-process ModelRunner).

A dump directory that cannot be created, or one that disappears after start-up, logs one ERROR naming the directory
and the fix, turns the dump off, and the forward goes on with exactly the outputs it has without a dump.
"""

import logging
import shutil

import torch

from sglang_eagle3_capture.core.sglang import target
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds
from sglang_eagle3_capture.observe.dump import ENV_DIR

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
IDS = DeclaredLayerIds([3, -1, 1], "test manifest")


def _prefill_twice(runner):
    with target.patched():
        runner.model.set_eagle3_layers_to_capture(IDS)
        try:
            return [runner.prefill(PROMPTS), runner.prefill(PROMPTS[::-1])]
        finally:
            runner.reset_capture()


def _errors(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "eagle3-capture dump" in
            r.getMessage()]


def test_a_dump_directory_that_cannot_be_created(runner, tmp_path, monkeypatch, caplog):
    reference = _prefill_twice(runner)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv(ENV_DIR, str(blocker / "dump"))
    with caplog.at_level(logging.INFO):
        outs = _prefill_twice(runner)
    (err,) = _errors(caplog)
    assert str(blocker / "dump") in err and "fix:" in err
    for out, ref in zip(outs, reference):
        assert torch.equal(out.aux, ref.aux)


def test_a_dump_directory_removed_while_serving(runner, tmp_path, monkeypatch, caplog):
    reference = _prefill_twice(runner)
    d = tmp_path / "dump"
    monkeypatch.setenv(ENV_DIR, str(d))
    with target.patched():
        runner.model.set_eagle3_layers_to_capture(IDS)
        try:
            shutil.rmtree(d)  # created at configure time, gone before the first forward
            with caplog.at_level(logging.INFO):
                outs = [runner.prefill(PROMPTS), runner.prefill(PROMPTS[::-1])]
        finally:
            runner.reset_capture()
    (err,) = _errors(caplog)
    assert str(d) in err and "fix:" in err and "serving goes on" in err
    for out, ref in zip(outs, reference):
        assert torch.equal(out.aux, ref.aux)
