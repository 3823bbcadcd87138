"""The standalone draft head (sglang_eagle3_capture/doctor/model.py) without SGLang: save/load, padding, the
target embedding, the EAGLE shift and its loader's errors.

It is compared with SGLang's own ``LlamaForCausalLMEagle3`` in tests/engine/test_draft_model_sglang.py.
"""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.doctor.model import Eagle3Draft, eagle3_shift, rope_frequencies
from support.draft_dirs import VARIANTS, mine_per_token, ragged_inputs, random_draft
from support.tolerances import TOLERANCES


def test_save_load_roundtrip_and_padding(tmp_path):
    draft_dir = random_draft(tmp_path / "d", **VARIANTS["all-options"])
    a = Eagle3Draft.from_pretrained(draft_dir)
    state = {k: v for k, v in a.sglang_state_dict().items() if k != "t2d"}
    save_file(state, str(tmp_path / "d" / "model.safetensors"))
    b = Eagle3Draft.from_pretrained(draft_dir)
    ids, aux = ragged_inputs(a.config)
    assert torch.equal(mine_per_token(a, ids, aux), mine_per_token(b, ids, aux))
    with torch.no_grad():  # right padding is exact: each sequence alone gives the same logits
        alone = torch.cat([a(i[None], x[None])[0] for i, x in zip(ids, aux)])
    torch.testing.assert_close(mine_per_token(a, ids, aux), alone, **TOLERANCES[torch.float32])


def test_target_embedding_replaces_the_drafts_own(tmp_path):
    draft_dir = random_draft(tmp_path / "d")
    embed = torch.randn(256, 64)
    model = Eagle3Draft.from_pretrained(draft_dir, target_embed=embed)
    assert model.embedding_source == "target" and torch.equal(model.embed_tokens.weight, embed)
    assert Eagle3Draft.from_pretrained(draft_dir).embedding_source == "draft"


def test_eagle3_shift_is_speculators_shift_batch():
    ids, aux = torch.arange(6), torch.arange(12.0).view(6, 2)
    tgt, mask = torch.arange(10, 16), torch.tensor([0, 0, 1, 1, 1, 0])
    i, a, t, m = eagle3_shift(ids, aux, tgt, mask)
    assert torch.equal(i, ids[1:]) and torch.equal(a, aux[:-1]) and torch.equal(t, tgt[1:])
    assert torch.equal(m, mask[1:].bool())


@pytest.mark.parametrize("breakage, file, field", [
    (lambda c, w: c.pop("hidden_size"), "config.json", "hidden_size"),
    (lambda c, w: c.update(architectures=["Eagle3Speculator"]), "config.json", "architectures"),
    (lambda c, w: c.update(rope_parameters={"rope_type": "llama3", "rope_theta": 1e4}), "config.json",
     "rope_parameters.rope_type"),
    (lambda c, w: c.update(rope_parameters={"rope_type": "yarn", "original_max_position_embeddings": 64}),
     "config.json", "rope_parameters.factor"),  # SGLang would take factor 1 with a warning
    (lambda c, w: c.update(rope_parameters={"rope_type": "yarn", "factor": 4.0}), "config.json",
     "rope_parameters.original_max_position_embeddings"),  # SGLang would take max_position_embeddings
    (lambda c, w: c.update(rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                            "beta_fast": "32"}), "config.json", "rope_parameters.beta_fast"),
    (lambda c, w: c.update(num_hidden_layers=True), "config.json", "num_hidden_layers"),  # a bool is not a count
    (lambda c, w: c.update(rms_norm_eps=0), "config.json", "rms_norm_eps"),
    (lambda c, w: w.pop("d2t"), "config.json", "d2t"),
    (lambda c, w: w.pop("fc.weight"), "config.json", "fc.weight"),
    (lambda c, w: w.update({"fc.weight": torch.zeros(64, 10)}), "model.safetensors", "fc.weight"),
    (lambda c, w: c.pop("draft_vocab_size"), "config.json", "draft_vocab_size"),  # lm_head from the target
    (lambda c, w: c.update(target_hidden_size=None), "config.json", "target_hidden_size"),  # SGLang cannot build it
])
def test_bad_draft_dirs_name_file_and_field(tmp_path, breakage, file, field):
    d = random_draft(tmp_path / "d")
    cfg, weights = json.loads((d / "config.json").read_text()), load_file(str(d / "model.safetensors"))
    breakage(cfg, weights)
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(weights, str(d / "model.safetensors"))
    with pytest.raises(InputError) as err:
        Eagle3Draft.from_pretrained(d)
    assert (err.value.file, err.value.field) == (str(d / file), field) and err.value.fix


def test_unknown_config_keys_are_kept_not_refused(tmp_path):
    d = random_draft(tmp_path / "d")
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(some_future_key={"x": 1}, eagle_config={**cfg.get("eagle_config", {}), "future_flag": True})
    (d / "config.json").write_text(json.dumps(cfg))
    assert Eagle3Draft.from_pretrained(d).config.hidden_size == cfg["hidden_size"]


def test_weights_sglang_ignores_are_reported(tmp_path):
    d = random_draft(tmp_path / "d")
    weights = load_file(str(d / "model.safetensors"))
    weights["verifier_lm_head.weight"] = torch.zeros(3)
    save_file(weights, str(d / "model.safetensors"))
    with pytest.warns(UserWarning, match="verifier_lm_head.weight"):
        model = Eagle3Draft.from_pretrained(d)
    assert model.ignored_weights == ["verifier_lm_head.weight"]


def test_a_layer_index_in_non_ascii_digits_is_ignored_not_a_crash(tmp_path):
    d = random_draft(tmp_path / "d")
    weights = load_file(str(d / "model.safetensors"))
    weights["layers.\u00b2.x.weight"] = torch.zeros(3)  # isdigit() but not int()
    save_file(weights, str(d / "model.safetensors"))
    with pytest.warns(UserWarning, match="layers.\u00b2.x.weight"):
        model = Eagle3Draft.from_pretrained(d)
    assert model.ignored_weights == ["layers.\u00b2.x.weight"]


def test_sglang_state_dict_names_the_single_layer_midlayer(tmp_path):
    state = Eagle3Draft.from_pretrained(random_draft(tmp_path / "d")).sglang_state_dict()
    assert "midlayer.self_attn.q_proj.weight" in state and not any(k.startswith("layers.") for k in state)


@pytest.mark.parametrize("yarn", [VARIANTS["yarn"]["yarn"], VARIANTS["yarn-deepseek"]["yarn"]])
def test_yarn_frequencies_equal_transformers_yarn(yarn):
    """The YaRN frequencies and cos/sin magnitude against transformers' own ``_compute_yarn_parameters`` (an
    implementation nobody here wrote; SGLang's is checked in tests/engine/test_draft_model_sglang.py), for settings
    both read alike (no ``attn_factor`` / ``extrapolation_factor``, which transformers does not read)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16, max_position_embeddings=8192,
                      rope_parameters={"rope_type": "yarn", "rope_theta": 5000.0, **yarn.to_dict()})
    hf_freq, hf_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    freq, factor = rope_frequencies(16, 5000.0, yarn)
    torch.testing.assert_close(freq, hf_freq, rtol=1e-6, atol=0)
    assert factor == pytest.approx(hf_factor, rel=1e-12)
    default, _ = rope_frequencies(16, 5000.0)
    assert not torch.allclose(freq, default)  # the ramp interpolates some frequencies: a real difference to check


def test_a_yarn_draft_round_trips_through_its_config(tmp_path):
    d = random_draft(tmp_path / "d", **VARIANTS["yarn-deepseek"])
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["rope_parameters"]["rope_type"] == "yarn" and cfg["rope_parameters"]["factor"] == 40.0
    assert Eagle3Draft.from_pretrained(d).config.yarn == VARIANTS["yarn-deepseek"]["yarn"]
