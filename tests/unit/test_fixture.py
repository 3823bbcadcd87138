"""The committed fixtures (fixtures/tiny: DeepSeek-V3; fixtures/tiny-llama: Llama) and their builder's modules
(fixtures/), without SGLang; every fixture test runs once per fixture (fixtures/specs.py).

Fast tests re-measure everything from the committed weights (fixture.json is read for seeds and sizes, and
its recorded criteria are compared with the re-measured ones). SGLang serving the committed targets, and the
slow rebuild of each fixture from scratch, are in tests/engine/test_fixture_engine.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig

from fixtures.criteria import check_criteria, sglang_default_layer_ids
from fixtures.language import COPY, MID, REVERSE, SEP, ZIP, Language, complete, rule, sample_prompt
from fixtures.samples import forward_states, load_target, sample_prompts
from fixtures.specs import SPECS
from fixtures.target import FAMILIES
from sglang_eagle3_capture.core.layer_ids import hidden_state_index
from sglang_eagle3_capture.core.manifest import check_fc_width, check_target, read_manifest
from support import REPO
from support.fixture import FIXTURE_NAMES, load_fixture_draft, remeasure
from support.tolerances import TOLERANCES

MAX_COMMITTED_BYTES = 5 * 1024 * 1024
# Re-measured top-1 may differ from fixture.json's in the last argmax ties on another CPU, not more.
RECORDED_TOP1_TOLERANCE = 0.01


@pytest.fixture(scope="module", params=FIXTURE_NAMES)
def spec(request):
    return SPECS[request.param]


@pytest.fixture(scope="module")
def fdir(spec):
    return spec.directory


@pytest.fixture(scope="module")
def info(fdir) -> dict:
    return json.loads((fdir / "fixture.json").read_text())


@pytest.fixture(scope="module")
def target(fdir):
    return load_target(fdir / "target")


def test_committed_fixture_is_complete_and_small(fdir):
    files = [p for p in fdir.rglob("*") if p.is_file()]
    names = {str(p.relative_to(fdir)) for p in files}
    for required in ("fixture.json", "prompts.json", "target/config.json", "target/model.safetensors",
                     "draft/config.json", "draft/model.safetensors", "draft/eagle3_manifest.json",
                     "samples/data_config.json", "samples/data_0.pt"):
        assert required in names, f"{fdir}/{required} is missing; rebuild with fixtures/build_fixture.py"
    assert sum(p.stat().st_size for p in files) < MAX_COMMITTED_BYTES


def test_target_config_is_what_sglangs_cpu_path_needs(spec, info, fdir):
    """transformers reads it as the spec's family, and it carries the keys SGLang's CPU path reads."""
    raw = json.loads((fdir / "target" / "config.json").read_text())
    cfg = AutoConfig.from_pretrained(fdir / "target")
    assert raw["architectures"] == [FAMILIES[spec.family].architecture]
    if spec.family == "deepseek_v3":  # MLA and MoE
        assert type(cfg).__name__ == "DeepseekV3Config"
        assert cfg.kv_lora_rank > 0 and cfg.q_lora_rank > 0 and cfg.n_routed_experts > 1 and cfg.n_shared_experts >= 1
        for key in ("rope_scaling", "rope_parameters"):  # get_rope_cpu: only deepseek_yarn on CPU
            assert raw[key]["rope_type"] == "yarn" and raw[key]["type"] == "yarn"
        assert raw["moe_layer_freq"] == 1 and raw["topk_method"] == "noaux_tc" and raw["scoring_func"] == "sigmoid"
    else:  # Llama: the standard keys only; SGLang's Llama builds its rope with get_rope, default rope is fine
        assert spec.family == "llama" and type(cfg).__name__ == "LlamaConfig"
        assert raw.get("rope_scaling") is None and raw["rope_parameters"]["rope_type"] == "default"
    # The layer count separates the training wiring from SGLang's default in every slot but none.
    n = cfg.num_hidden_layers
    assert n == info["num_hidden_layers"]
    differing = [a != b for a, b in zip(info["training_layer_ids"], sglang_default_layer_ids(n))]
    assert sum(differing) >= 2, (info["training_layer_ids"], sglang_default_layer_ids(n))


def test_draft_config_and_manifest(info, target, fdir):
    manifest = read_manifest(fdir / "draft")
    assert list(manifest.layer_ids) == info["training_layer_ids"]
    assert manifest.target_architecture == target.config.architectures[0]
    check_target(manifest, target.config, where=f"{fdir}/target/config.json")
    draft = load_fixture_draft(fdir, target)
    check_fc_width(manifest, draft.config.fc_in_features, file=f"{fdir}/draft/config.json")
    cfg = json.loads((fdir / "draft" / "config.json").read_text())
    # Stock SGLang reads capture ids only from eagle_config (spec_aux_hidden_state.py); none there -> default.
    assert "eagle_aux_hidden_state_layer_ids" not in cfg["eagle_config"]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [hidden_state_index(i) for i in info["training_layer_ids"]]


@pytest.mark.fixture  # re-measures from the committed weights (make quick leaves it out)
def test_criteria_hold_when_remeasured(spec, info, target, fdir):
    """The spec's thresholds hold on the held-out split, and fixture.json recorded what the weights give."""
    criteria = remeasure(fdir, info, target)
    assert check_criteria(criteria, spec.thresholds) == [], criteria
    for name, recorded in info["criteria"].items():
        if isinstance(recorded, dict):
            assert abs(criteria[name]["top1"] - recorded["top1"]) <= RECORDED_TOP1_TOLERANCE, (name, criteria)
    if spec.thresholds.min_embedding_drop is not None:  # the embedding chunk matters (family issue, part 5)
        drop = criteria["training"]["top1"] - criteria["embedding_zeroed"]["top1"]
        assert drop >= spec.thresholds.min_embedding_drop, criteria


@pytest.mark.fixture  # re-measures from the committed weights (make quick leaves it out)
def test_committed_samples_are_the_targets_own_states(info, target, fdir):
    """Legacy-layout samples: ids, loss mask and every stored tensor recomputed from the committed target."""
    config = json.loads((fdir / "samples" / "data_config.json").read_text())
    layer_ids = config["hidden_states"]["layer_ids"]
    assert layer_ids == info["training_layer_ids"] + [info["final_layer_id"]]
    files = sorted((fdir / "samples").glob("data_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
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


@pytest.mark.fixture  # re-measures from the committed weights (make quick leaves it out)
def test_samples_cli_regenerates_the_committed_samples(info, tmp_path, fdir):
    """``python -m fixtures.samples`` rebuilds legacy-layout samples from the committed target."""
    proc = subprocess.run([sys.executable, "-m", "fixtures.samples", str(fdir / "target"), str(tmp_path), "--n", "3",
                           "--seed", str(info["heldout"]["seed"])], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "data_config.json").read_text()) == \
        json.loads((fdir / "samples" / "data_config.json").read_text())
    for i in range(3):
        new, old = torch.load(tmp_path / f"data_{i}.pt"), torch.load(fdir / "samples" / f"data_{i}.pt")
        assert torch.equal(new["input_ids"], old["input_ids"]) and torch.equal(new["loss_mask"], old["loss_mask"])
        for a, b in zip(new["hidden_states"], old["hidden_states"], strict=True):
            torch.testing.assert_close(a, b, **TOLERANCES[torch.float32])


def test_committed_prompts_are_the_heldout_prompts(info, fdir):
    prompts = json.loads((fdir / "prompts.json").read_text())
    assert prompts == sample_prompts(Language(**info["language"]), len(prompts), info["heldout"]["seed"])


def test_zip_task_interleaves_the_two_lists_and_leaves_copy_reverse_draws_alone():
    """ZIP (tiny-llama's task): ``[BOS, ZIP, a.., MID, b.., SEP]`` -> ``a_1 b_1 a_2 b_2 ..``; a language with the
    default tasks draws exactly the prompts it drew before ZIP existed (fixtures/tiny's committed prompts)."""
    assert rule(ZIP, [10, 11, 12, MID, 20, 21]) == [10, 20, 11, 21, 12]
    assert rule(COPY, [10, 11]) == [10, 11] and rule(REVERSE, [10, 11]) == [11, 10]
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        p = sample_prompt(Language(tasks=(ZIP,)), gen)
        keys = p[2:-1]
        a, b = keys[:keys.index(MID)], keys[keys.index(MID) + 1:]
        assert p[1] == ZIP and p[-1] == SEP and len(a) - len(b) in (0, 1) and 6 <= len(a) + len(b) <= 14
        assert complete(p)[len(p):-1] == [k for i in range(len(a)) for k in ([a[i], b[i]] if i < len(b) else [a[i]])]
    tiny = json.loads((SPECS["tiny"].directory / "prompts.json").read_text())
    assert sample_prompts(Language(), 5, seed=6) == tiny[:5]
