"""The committed tiny fixture (fixtures/tiny) served by SGLang, and the slow rebuild of it from scratch
(fixtures/build_fixture.py) meeting the criteria again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from fixtures.criteria import check_criteria
from fixtures.samples import load_target
from support import REPO, subprocess_env
from support.fixture import FIXTURE, remeasure
from support.sglang_inprocess import get_runner
from support.tolerances import TOLERANCES


@pytest.fixture(scope="module")
def target():
    return load_target(FIXTURE / "target")


def test_sglang_serves_the_committed_target_like_hf(target, tmp_path):
    """SGLang's own DeepseekV3ForCausalLM (CPU path, subprocess) loads the target; final hidden states and
    greedy next tokens on held-out prompts match HF's."""
    prompts = json.loads((FIXTURE / "prompts.json").read_text())[:8]
    out = tmp_path / "sglang.pt"
    proc = subprocess.run([sys.executable, __file__, str(FIXTURE / "target"), json.dumps(prompts), str(out)],
                          env=subprocess_env(), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = torch.load(out)
    with torch.no_grad():
        ref = [target(input_ids=torch.tensor([p]), output_hidden_states=True) for p in prompts]
    assert got["next_token_ids"] == [int(r.logits[0, -1].argmax()) for r in ref]
    torch.testing.assert_close(got["hidden"], torch.cat([r.hidden_states[-1][0] for r in ref]),
                               **TOLERANCES[torch.float32])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_rebuild_from_scratch_meets_the_criteria(tmp_path):
    out = tmp_path / "fixture"
    proc = subprocess.run([sys.executable, str(REPO / "fixtures" / "build_fixture.py"), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=1700)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    info = json.loads((out / "fixture.json").read_text())
    criteria = remeasure(out, info, load_target(out / "target"))
    assert check_criteria(criteria) == [], criteria


def _sglang_side(target_dir: str, prompts: str, out: str) -> None:
    """Subprocess body: SGLang's in-process ModelRunner on the fixture target, one prefill (the CPU runtime came
    with the environment, support.subprocess_env)."""
    result = get_runner(target_dir).prefill(json.loads(prompts))
    torch.save({"hidden": result.hidden, "next_token_ids": result.next_token_ids}, out)


if __name__ == "__main__":
    _sglang_side(*sys.argv[1:])
