"""The committed tiny fixture (fixtures/tiny) and its builder's modules (fixtures/), without SGLang.

Fast tests re-measure everything from the committed weights (fixture.json is only read for seeds
and sizes). SGLang serving the committed target, and the slow rebuild of the fixture from scratch, are
in tests/engine/test_fixture_engine.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig

from fixtures.criteria import check_criteria, sglang_default_layer_ids
from fixtures.language import SEP, Language
from fixtures.samples import forward_states, load_target, sample_prompts
from sglang_eagle3_capture.layer_ids import hidden_state_index
from sglang_eagle3_capture.manifest import check_fc_width, check_target, read_manifest
from support import REPO
from support.fixture import FIXTURE, load_fixture_draft, remeasure
from support.tolerances import TOLERANCES

MAX_COMMITTED_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def info() -> dict:
    return json.loads((FIXTURE / "fixture.json").read_text())


@pytest.fixture(scope="module")
def target():
    return load_target(FIXTURE / "target")


def test_committed_fixture_is_complete_and_small():
    files = [p for p in FIXTURE.rglob("*") if p.is_file()]
    names = {str(p.relative_to(FIXTURE)) for p in files}
    for required in ("fixture.json", "prompts.json", "target/config.json", "target/model.safetensors",
                     "draft/config.json", "draft/model.safetensors", "draft/eagle3_manifest.json",
                     "samples/data_config.json", "samples/data_0.pt"):
        assert required in names, f"fixtures/tiny/{required} is missing; rebuild with fixtures/build_fixture.py"
    assert sum(p.stat().st_size for p in files) < MAX_COMMITTED_BYTES


def test_target_config_is_what_sglangs_cpu_path_needs(info):
    """transformers reads it as DeepSeek-V3 with MLA and MoE, and it carries the keys SGLang's CPU path reads."""
    raw = json.loads((FIXTURE / "target" / "config.json").read_text())
    cfg = AutoConfig.from_pretrained(FIXTURE / "target")
    assert type(cfg).__name__ == "DeepseekV3Config" and raw["architectures"] == ["DeepseekV3ForCausalLM"]
    assert cfg.kv_lora_rank > 0 and cfg.q_lora_rank > 0 and cfg.n_routed_experts > 1 and cfg.n_shared_experts >= 1
    for key in ("rope_scaling", "rope_parameters"):  # get_rope_cpu: only deepseek_yarn on CPU
        assert raw[key]["rope_type"] == "yarn" and raw[key]["type"] == "yarn"
    assert raw["moe_layer_freq"] == 1 and raw["topk_method"] == "noaux_tc" and raw["scoring_func"] == "sigmoid"
    # The layer count separates the training wiring from SGLang's default in every slot but none.
    n = cfg.num_hidden_layers
    assert n == info["num_hidden_layers"]
    differing = [a != b for a, b in zip(info["training_layer_ids"], sglang_default_layer_ids(n))]
    assert sum(differing) >= 2, (info["training_layer_ids"], sglang_default_layer_ids(n))


def test_draft_config_and_manifest(info, target):
    manifest = read_manifest(FIXTURE / "draft")
    assert list(manifest.layer_ids) == info["training_layer_ids"]
    check_target(manifest, target.config, where="fixtures/tiny/target/config.json")
    draft = load_fixture_draft(FIXTURE, target)
    check_fc_width(manifest, draft.config.fc_in_features, where="fixtures/tiny/draft/config.json")
    cfg = json.loads((FIXTURE / "draft" / "config.json").read_text())
    # Stock SGLang reads capture ids only from eagle_config (spec_aux_hidden_state.py); none there -> default.
    assert "eagle_aux_hidden_state_layer_ids" not in cfg["eagle_config"]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [hidden_state_index(i) for i in info["training_layer_ids"]]


def test_criteria_hold_when_remeasured(info, target):
    criteria = remeasure(FIXTURE, info, target)
    assert check_criteria(criteria) == [], criteria


def test_committed_samples_are_the_targets_own_states(info, target):
    """Legacy-layout samples: ids, loss mask and every stored tensor recomputed from the committed target."""
    config = json.loads((FIXTURE / "samples" / "data_config.json").read_text())
    layer_ids = config["hidden_states"]["layer_ids"]
    assert layer_ids == info["training_layer_ids"] + [info["final_layer_id"]]
    files = sorted((FIXTURE / "samples").glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    samples = [torch.load(f) for f in files]
    prompts = sample_prompts(Language(**info["language"]), len(samples), info["heldout"]["seed"])
    ref = forward_states(target, [s["input_ids"].tolist() for s in samples])
    for b, (s, prompt) in enumerate(zip(samples, prompts)):
        n = len(s["input_ids"])
        assert s["input_ids"][: len(prompt)].tolist() == prompt
        assert torch.equal(s["loss_mask"].bool(), ref["loss_mask"][b, :n])
        # the embedding chunk is the embedding lookup, exactly (what the doctor checks)
        assert torch.equal(s["hidden_states"][0], target.model.embed_tokens.weight[s["input_ids"]])
        for layer_id, stored in zip(layer_ids, s["hidden_states"]):
            torch.testing.assert_close(stored, ref["states"][b, :n, hidden_state_index(layer_id)],
                                       **TOLERANCES[torch.float32])
    # The continuation is the target's greedy one: its argmax agrees with every token after SEP.
    t = torch.arange(ref["ids"].shape[1])
    generated = ((t > (ref["ids"] == SEP).int().argmax(1, keepdim=True)) & (t < ref["lengths"][:, None]))[:, 1:]
    assert torch.equal(ref["target_ids"][:, :-1][generated], ref["ids"][:, 1:][generated])


def test_samples_cli_regenerates_the_committed_samples(info, tmp_path):
    """``python -m fixtures.samples`` rebuilds legacy-layout samples from the committed target."""
    proc = subprocess.run([sys.executable, "-m", "fixtures.samples", str(FIXTURE / "target"), str(tmp_path), "--n", "3",
                           "--seed", str(info["heldout"]["seed"])], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "data_config.json").read_text()) == \
        json.loads((FIXTURE / "samples" / "data_config.json").read_text())
    for i in range(3):
        new, old = torch.load(tmp_path / f"data_{i}.pt"), torch.load(FIXTURE / "samples" / f"data_{i}.pt")
        assert torch.equal(new["input_ids"], old["input_ids"]) and torch.equal(new["loss_mask"], old["loss_mask"])
        for a, b in zip(new["hidden_states"], old["hidden_states"], strict=True):
            torch.testing.assert_close(a, b, **TOLERANCES[torch.float32])


def test_committed_prompts_are_the_heldout_prompts(info):
    prompts = json.loads((FIXTURE / "prompts.json").read_text())
    assert prompts == sample_prompts(Language(**info["language"]), len(prompts), info["heldout"]["seed"])
