"""The committed fixtures (fixtures/tiny: DeepSeek-V3, fixtures/tiny-llama: Llama) served by SGLang, and the slow
rebuild of each from scratch (fixtures/build_fixture.py --fixture NAME) meeting its criteria again."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

from fixtures.criteria import check_criteria
from fixtures.samples import load_target
from fixtures.specs import SPECS
from support import REPO
from support.fixture import FIXTURE_NAMES, remeasure
from support.tolerances import TOLERANCES


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_sglang_serves_the_committed_target_like_hf(name, forked, tmp_path):
    """SGLang's own model class for the target (CPU path, a forked child) loads it; final hidden states and greedy
    next tokens on held-out prompts match HF's."""
    fixture = SPECS[name].directory
    target = load_target(fixture / "target")
    prompts = json.loads((fixture / "prompts.json").read_text())[:8]
    out = tmp_path / "sglang.pt"
    rc, log = forked.call("support.sglang_side:prefill_to_file", fixture / "target", json.dumps(prompts), out)
    assert rc == 0, log[-4000:]
    got = torch.load(out)
    with torch.no_grad():
        ref = [target(input_ids=torch.tensor([p]), output_hidden_states=True) for p in prompts]
    assert got["next_token_ids"] == [int(r.logits[0, -1].argmax()) for r in ref]
    torch.testing.assert_close(got["hidden"], torch.cat([r.hidden_states[-1][0] for r in ref]),
                               **TOLERANCES[torch.float32])


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_rebuild_from_scratch_meets_the_criteria(name, tmp_path):
    out = tmp_path / "fixture"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "fixtures" / "build_fixture.py"), "--fixture", name,
                           "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=1700)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print(f"{name}: rebuilt in {time.monotonic() - start:.0f} s")
    info = json.loads((out / "fixture.json").read_text())
    criteria = remeasure(out, info, load_target(out / "target"))
    assert check_criteria(criteria, SPECS[name].thresholds) == [], criteria
