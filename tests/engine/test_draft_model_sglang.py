"""The standalone draft head (sglang_eagle3_capture/doctor/model.py) against SGLang's own ``LlamaForCausalLMEagle3``.

The SGLang side runs in a forked child (support/forked.py, support/sglang_side.py), because SGLang's process-wide
state allows one in-process ModelRunner per process (harness/sglang_inprocess.py) and other tests
build one for a target. There, SGLang's ModelRunner loads the draft dir with its own loader and
runs one extend batch; the aux hidden states are handed in as ``forward_batch.spec_info``, which
is exactly where SGLang's EAGLE-3 worker puts the target's packed aux hidden states. The final hidden
states SGLang hands its LogitsProcessor are projected with SGLang's own ``lm_head`` weight.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.doctor.model import DraftConfig, Eagle3Draft, eagle3_shift
from support.draft_dirs import BASE, VARIANTS, mine_per_token, ragged_inputs, random_draft
from support.fixture import FIXTURE
from support.tolerances import TOLERANCES


def run_sglang(forked, draft_dir: Path, ids, aux, tmp_path: Path) -> dict:
    """SGLang's LlamaForCausalLMEagle3 on the same inputs, in a forked child (see module docstring)."""
    io, out = tmp_path / "io.pt", tmp_path / "io.out.pt"
    torch.save({"ids": [i.tolist() for i in ids], "aux": torch.cat(aux)}, io)
    rc, log = forked.call("support.sglang_side:draft_extend_to_file", draft_dir, io, out)
    assert rc == 0, log[-4000:]
    return torch.load(out)


def check_against_sglang(forked, draft_dir: Path, ids, aux, tmp_path: Path, target_embed=None) -> dict:
    ours = Eagle3Draft.from_pretrained(draft_dir, target_embed=target_embed)
    got = run_sglang(forked, draft_dir, ids, aux, tmp_path)
    mine = mine_per_token(ours, ids, aux)
    assert got["logits"].shape == mine.shape
    torch.testing.assert_close(mine, got["logits"], **TOLERANCES[torch.float32])
    # SGLang's own greedy pick at each prompt's last token (draft ids), and its hot-token map (= d2t).
    assert mine[torch.tensor([len(i) for i in ids]).cumsum(0) - 1].argmax(-1).tolist() == got["next_token_ids"]
    assert torch.equal(ours.to_target_ids(torch.arange(ours.config.draft_vocab_size)), got["hot_token_id"])
    # The comparison can fail: permuting the fc chunks moves the logits far outside the tolerance.
    k = ours.config.num_aux_hidden_states
    swapped = [torch.cat(a.chunk(k, dim=-1)[::-1], dim=-1) for a in aux]
    assert (mine_per_token(ours, ids, swapped) - got["logits"]).abs().max() > 1e3 * TOLERANCES[torch.float32]["atol"]
    return got


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_matches_sglang_llama_eagle3(forked, tmp_path, variant):
    draft_dir = random_draft(tmp_path / "draft", **VARIANTS[variant])
    cfg = DraftConfig.from_dict(json.loads((draft_dir / "config.json").read_text()))
    assert cfg == DraftConfig(**{**BASE, **VARIANTS[variant]})  # to_sglang_config round-trips
    got = check_against_sglang(forked, draft_dir, *ragged_inputs(cfg), tmp_path)
    if cfg.yarn is not None:  # the same weights with default RoPE are far from SGLang's: YaRN is what matched
        plain = tmp_path / "plain-rope"
        shutil.copytree(draft_dir, plain)
        (plain / "config.json").write_text(json.dumps(replace(cfg, yarn=None).to_sglang_config()))
        mine = mine_per_token(Eagle3Draft.from_pretrained(plain), *ragged_inputs(cfg))
        assert (mine - got["logits"]).abs().max() > 1e2 * TOLERANCES[torch.float32]["atol"]


def test_fixture_draft_matches_sglang_on_training_samples(forked, tmp_path):
    """The committed fixture draft on its own legacy-layout samples, embedding from the target as served."""
    files = sorted((FIXTURE / "samples").glob("data_*.pt"))[:4]
    samples = [torch.load(f) for f in files]
    embed = load_file(str(FIXTURE / "target" / "model.safetensors"))["model.embed_tokens.weight"]
    ids, aux = [], []
    for s in samples:
        i, a, _, _ = eagle3_shift(s["input_ids"], torch.cat(s["hidden_states"][:3], -1), s["input_ids"], s["loss_mask"])
        ids.append(i)
        aux.append(a)
    check_against_sglang(forked, FIXTURE / "draft", ids, aux, tmp_path, target_embed=embed)
