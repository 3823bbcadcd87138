"""Foreign-format readers (doctor/formats.py: the registry and one class per format).

Configs are shaped like the real files (docs/formats-and-convert.md); the speculators
ones are also produced by the speculators package's own config class. What stock SGLang would feed
(core/stock.py) is tested in tests/unit/test_readings.py.
"""

import pytest
from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.models.eagle3 import Eagle3SpeculatorConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig
from transformers import LlamaConfig

from sglang_eagle3_capture.core.config_keys import CONVERTED_MARKER_KEY
from sglang_eagle3_capture.core.errors import AmbiguousLayerIds, InputError
from sglang_eagle3_capture.doctor.formats import (
    EagleDefaultFormat,
    SGLangEagleConfigFormat,
    SpeculatorsFormat,
    check_draft_config,
    load_draft_config,
    read_draft_config,
)

KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "text_config": {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168},
}
DSV3 = {"architectures": ["DeepseekV3ForCausalLM"], "num_hidden_layers": 61, "hidden_size": 7168}


def speculators_config(**overrides):
    """A speculators 0.9.0 Eagle-3 config.json as written by save_pretrained (trained Kimi-K2.5 draft)."""
    cfg = {
        "architectures": ["Eagle3DraftModel"], "draft_vocab_size": 32000, "dtype": "bfloat16",
        "eagle_aux_hidden_state_layer_ids": [0, 3, 31], "embed_requires_grad": False, "fc_norm": False,
        "norm_before_fc": True, "norm_before_residual": True, "norm_output": True,
        "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                               "verifier": {"architectures": ["KimiK25ForConditionalGeneration"],
                                            "name_or_path": "moonshotai/Kimi-K2.5"}},
        "speculators_model_type": "eagle3", "speculators_version": "0.9.0", "target_hidden_size": None,
        "transformer_layer_config": {"model_type": "llama", "hidden_size": 7168, "num_hidden_layers": 1,
                                     "vocab_size": 163840},
    }
    cfg.update(overrides)
    return cfg


def read_speculators(cfg, target, file="config.json", fc_in_features=None):
    """speculators' own format reader (the registry would pick it for these configs)."""
    return SpeculatorsFormat.layer_ids(cfg, target, file, fc_in_features=fc_in_features)


def test_motivating_case_speculators_kimi_k25_embed_layer3_layer31():
    r = read_speculators(speculators_config(), KIMI_K25, "kimi-draft/config.json")
    assert r.layer_ids == (-1, 2, 30)
    assert r.provenance == {"source": "speculators-config", "file": "kimi-draft/config.json",
                            "field": "eagle_aux_hidden_state_layer_ids", "original_ids": [0, 3, 31],
                            "convention": "vllm-hf-index", "inferred": False}
    assert r.messages == ()


def test_speculators_config_written_by_the_speculators_package(tmp_path):
    tl = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                     num_attention_heads=4, num_key_value_heads=2)
    cfg = Eagle3SpeculatorConfig(
        transformer_layer_config=tl, draft_vocab_size=128, eagle_aux_hidden_state_layer_ids=[0, 3, 31],
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3", proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=3)],
            default_proposal_method="greedy",
            verifier=VerifierConfig(name_or_path=None, architectures=["KimiK25ForConditionalGeneration"])))
    cfg.save_pretrained(tmp_path)
    r = read_draft_config(load_draft_config(tmp_path / "config.json"), KIMI_K25)
    assert r.layer_ids == (-1, 2, 30) and r.provenance["source"] == "speculators-config"


def test_speculators_absent_ids_use_speculators_default_marked_inferred():
    cfg = speculators_config()
    del cfg["eagle_aux_hidden_state_layer_ids"]
    r = read_speculators(cfg, KIMI_K25)
    # speculators' default HF indices [2, N//2, N-3] = [2, 30, 58] -> outputs of layers 1, 29, 57
    assert r.layer_ids == (1, 29, 57)
    assert r.provenance["inferred"] is True and r.provenance["source"] == "speculators-default"
    assert r.provenance["original_ids"] is None
    assert len(r.messages) == 1 and "inferred" in r.messages[0] and "[2, 30, 58]" in r.messages[0]


def test_speculators_issue_1065_final_layer_dropped_when_the_fc_takes_one_state_fewer():
    target = {"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 93, "hidden_size": 4096}
    r = read_speculators(speculators_config(eagle_aux_hidden_state_layer_ids=[2, 46, 91, 93]), target,
                         fc_in_features=3 * 4096)
    assert r.layer_ids == (1, 45, 90)
    assert r.provenance["original_ids"] == [2, 46, 91, 93]
    assert any("dropped" in m and "1065" in m for m in r.messages)


def test_speculators_final_layer_is_a_pre_norm_fc_input_when_the_fc_takes_it():
    # issue 20: [0, 2, 7] on a 7-layer Llama with fc.weight [H, 3H] is speculators 0.9's vLLM extraction of HF
    # indices 0, 2 and 7, index 7 before the final norm: layer ids [-1, 1, 6], never [-1, 1]
    target = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 7, "hidden_size": 96}
    r = read_speculators(speculators_config(eagle_aux_hidden_state_layer_ids=[0, 2, 7]), target,
                         fc_in_features=3 * 96)
    assert r.layer_ids == (-1, 1, 6)
    assert r.provenance["original_ids"] == [0, 2, 7]


def test_speculators_final_layer_without_weights_is_ambiguous_naming_both_readings():
    target = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 7, "hidden_size": 96}
    with pytest.raises(AmbiguousLayerIds) as e:
        read_speculators(speculators_config(eagle_aux_hidden_state_layer_ids=[0, 2, 7]), target, "c.json")
    assert (e.value.file, e.value.field, e.value.exit_code) == ("c.json", "eagle_aux_hidden_state_layer_ids", 3)
    assert {r.layer_ids for r in e.value.readings} == {(-1, 1), (-1, 1, 6)}


@pytest.mark.parametrize("width", [2 * 96 - 96, 4 * 96])
def test_speculators_final_layer_with_an_fc_of_another_width_is_refused(width):
    target = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 7, "hidden_size": 96}
    with pytest.raises(InputError) as e:
        read_speculators(speculators_config(eagle_aux_hidden_state_layer_ids=[0, 2, 7]), target, "c.json",
                         fc_in_features=width)
    assert (e.value.file, e.value.field) == ("c.json", "eagle_aux_hidden_state_layer_ids") and e.value.fix
    assert not isinstance(e.value, AmbiguousLayerIds)


def test_speculators_final_layer_not_last_is_refused():
    target = {"architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 93, "hidden_size": 4096}
    with pytest.raises(InputError) as e:
        read_speculators(speculators_config(eagle_aux_hidden_state_layer_ids=[2, 93, 46]), target, "c.json")
    assert (e.value.file, e.value.field) == ("c.json", "eagle_aux_hidden_state_layer_ids") and e.value.fix


def test_speculators_listed_out_of_order_is_read_in_capture_order():
    r = read_speculators(speculators_config(eagle_aux_hidden_state_layer_ids=[31, 0, 3]), KIMI_K25)
    assert r.layer_ids == (-1, 2, 30)
    assert any("ascending" in m for m in r.messages)


def test_speculators_out_of_range_names_file_and_field():
    with pytest.raises(InputError) as e:
        read_speculators(speculators_config(eagle_aux_hidden_state_layer_ids=[0, 3, 70]), KIMI_K25, "d/config.json")
    assert (e.value.file, e.value.field) == ("d/config.json", "eagle_aux_hidden_state_layer_ids") and e.value.fix


def test_specforge_deepseek_v3_config():
    # SpecForge configs/deepseek-v3-671b-eagle3.json
    cfg = {"architectures": ["LlamaForCausalLMEagle3"],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_aux_hidden_state": True},
           "hidden_size": 7168, "num_hidden_layers": 1, "vocab_size": 129280, "draft_vocab_size": 32000}
    r = SGLangEagleConfigFormat.layer_ids(cfg, DSV3, "config.json")
    assert r.layer_ids == (1, 29, 57)
    assert r.provenance["convention"] == "sglang-output-of-layer" and r.messages == ()
    assert read_draft_config(cfg, DSV3).layer_ids == (1, 29, 57)


def test_an_sglang_list_whose_meaning_depends_on_the_training_release_is_ambiguous():
    # [2, 30, 58] on a 61-layer DeepSeek target: layer ids [2, 30, 58] to a layer-output hook or SGLang <= 0.5.11
    # (always +1), [1, 29, 57] to SGLang >= 0.5.13.post1 (+1 only when the first id is 1): both were trained.
    cfg = {"architectures": ["LlamaForCausalLMEagle3"],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}}
    with pytest.raises(AmbiguousLayerIds) as e:
        SGLangEagleConfigFormat.layer_ids(cfg, DSV3, "config.json")
    by_ids = {r.layer_ids: r for r in e.value.readings}
    assert set(by_ids) == {(2, 30, 58), (1, 29, 57)}
    assert "0.5.11" in by_ids[(2, 30, 58)].versions and "Model Optimizer" in " ".join(by_ids[(2, 30, 58)].who)
    assert {"0.5.13.post1", "0.5.23"} <= set(by_ids[(1, 29, 57)].versions)
    assert (e.value.file, e.value.field) == ("config.json", "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert "verify" in e.value.fix and "--trained-with" in e.value.fix
    assert SGLangEagleConfigFormat.layer_ids(cfg, DSV3, "c", "sglang==0.5.23").layer_ids == (1, 29, 57)
    assert SGLangEagleConfigFormat.layer_ids(cfg, DSV3, "c", "layer-output").layer_ids == (2, 30, 58)
    assert read_draft_config(cfg, DSV3, trained_with="sglang==0.5.11").layer_ids == (2, 30, 58)


def test_an_sglang_list_every_reading_agrees_on_is_read():
    cfg = {"architectures": ["LlamaForCausalLMEagle3"],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}}
    r = SGLangEagleConfigFormat.layer_ids(cfg, KIMI_K25, "config.json")
    assert r.layer_ids == (1, 29, 57) and r.messages == ()


def test_a_training_release_that_cannot_run_the_list_is_refused():
    cfg = {"architectures": ["LlamaForCausalLMEagle3"],
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}}
    # loop index 0 crashes SGLang 0.5.13.post1's DeepSeek loop, so no draft was trained that way
    with pytest.raises(InputError) as e:
        SGLangEagleConfigFormat.layer_ids(cfg, DSV3, "c", "sglang==0.5.13.post1")
    assert (e.value.file, e.value.field) == ("c", "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert "0.5.13.post1" not in e.value.fix and "0.5.23" in e.value.fix  # the releases that do run the list


def test_ids_marked_as_layer_ids_are_read_as_written():
    ec = {"eagle_aux_hidden_state_layer_ids": [30, -1, 2], "eagle_aux_hidden_state_layer_ids_convention":
          "sglang-eagle3-capture/layer-id"}
    r = read_draft_config({"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": ec}, DSV3)
    assert r.layer_ids == (30, -1, 2) and r.provenance["convention"] == "layer-id"


def test_original_eagle_draft_uses_low_mid_high_default():
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "draft_vocab_size": 32000,
           "num_hidden_layers": 1, "vocab_size": 128256}
    llama = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096}
    r = read_draft_config(cfg, llama)
    assert r.layer_ids == (1, 15, 28)  # HF [2, 16, 29], captured before layers 2, 16, 29
    assert r.provenance["inferred"] is True and r.provenance["source"] == "eagle-default"
    assert r.layer_ids == EagleDefaultFormat.layer_ids(cfg, llama, "config.json").layer_ids


@pytest.mark.parametrize("cfg, field", [
    ({CONVERTED_MARKER_KEY: "eagle3_manifest.json", "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}},
     CONVERTED_MARKER_KEY),
    ({"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}, "eagle_aux_hidden_state_layer_ids"),  # no known convention
    ({"architectures": ["LlamaForCausalLM"]}, "architectures"),  # not an EAGLE-3 draft
    ({"speculators_model_type": "dflash"}, "speculators_model_type"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2], "use_aux_hidden_state": False}},
     "eagle_config.use_aux_hidden_state"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": "1,29,57"}},
     "eagle_config.eagle_aux_hidden_state_layer_ids"),
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, True, 57]}},
     "eagle_config.eagle_aux_hidden_state_layer_ids[1]"),  # a bool is not a layer id
    ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": []}}, "eagle_config.eagle_aux_hidden_state_layer_ids"),
    ({"eagle_config": [1, 29, 57]}, "eagle_config"),
])
def test_dispatch_refusals_name_file_and_field(cfg, field):
    with pytest.raises(InputError) as e:
        read_draft_config(cfg, DSV3, file="draft/config.json")
    assert (e.value.file, e.value.field) == ("draft/config.json", field) and e.value.fix


def test_draft_config_keeps_unknown_keys_and_refuses_a_bool_where_an_int_belongs():
    # HF draft configs carry keys nobody here knows: kept (also inside eagle_config), never refused.
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "some_future_key": {"x": 1},
           "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57], "use_last_layernorm": True}}
    assert check_draft_config(cfg, "c.json") is cfg
    assert read_draft_config(cfg, DSV3).layer_ids == (1, 29, 57)
    with pytest.raises(InputError) as e:
        check_draft_config({**cfg, "num_aux_hidden_states": True}, "c.json")
    assert (e.value.file, e.value.field) == ("c.json", "num_aux_hidden_states") and e.value.fix


def test_every_id_list_a_stock_engine_reads_is_declared_a_list_of_integers():
    from sglang_eagle3_capture.core import releases

    for reader in releases.other_engines():
        for dotted in reader.keys:
            *outer, key = dotted.split(".")
            cfg = {key: ["2"]}
            for name in reversed(outer):
                cfg = {name: cfg}
            with pytest.raises(InputError) as e:
                check_draft_config(cfg, "c.json")
            assert e.value.field == f"{dotted}[0]", dotted


def test_trained_with_layer_output_is_refused_when_an_id_is_past_the_last_layer():
    # GPT-OSS N=6, ids [1, 3, 6]: no layer 6 to hook, so only the SGLang reading (max is N: loop indices) remains;
    # `layer-output` used to return that reading, (0, 2, 5), silently.
    gpt_oss = {"architectures": ["GptOssForCausalLM"], "num_hidden_layers": 6, "hidden_size": 64}
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 6]}}
    with pytest.raises(InputError) as e:
        SGLangEagleConfigFormat.layer_ids(cfg, gpt_oss, "config.json", "layer-output")
    assert (e.value.file, e.value.field) == ("config.json", "eagle_config.eagle_aux_hidden_state_layer_ids")
    assert e.value.fix.startswith("pass sglang==")
    assert SGLangEagleConfigFormat.layer_ids(cfg, gpt_oss, "c", "sglang==0.5.23").layer_ids == (0, 2, 5)


@pytest.mark.parametrize("cfg", [
    {"eagle_config": "x" * 100_000},
    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ["x"] * 100_000}},
    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "eagle_aux_hidden_state_layer_ids_convention":
                      "y" * 100_000}},
    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3], "use_aux_hidden_state": "z" * 100_000}},
])
def test_a_huge_user_value_is_cut_in_the_message(cfg):
    with pytest.raises(InputError) as e:
        read_draft_config({"architectures": ["LlamaForCausalLMEagle3"], **cfg}, DSV3, file="config.json")
    assert len(str(e.value)) < 1000 and e.value.file == "config.json" and e.value.field.startswith("eagle_config")
