"""``convert``'s output as SGLang 0.5.23 parses it, in this process (``get_config``, SGLang's config reader)."""

import json

import pytest
from safetensors.torch import load_file

from sglang_eagle3_capture.doctor.convert import convert
from support.speculators_drafts import build_speculators_draft


@pytest.fixture(scope="module")
def converted(speculators_draft, kimi_target, tmp_path_factory):
    dst = tmp_path_factory.mktemp("conv") / "sglang_draft"
    return convert(speculators_draft, dst, target=kimi_target)


def test_sglang_parses_the_converted_config(converted):
    from sglang.srt.utils.hf_transformers_utils import get_config

    c = get_config(str(converted.dst), trust_remote_code=False)
    assert c.architectures == ["LlamaForCausalLMEagle3"]
    assert c.eagle_config["eagle_aux_hidden_state_layer_ids"] == [0, 3, 31]
    assert (c.target_hidden_size, c.num_aux_hidden_states, c.draft_vocab_size) == (64, 3, 128)
    assert (c.norm_before_fc, c.fc_norm, c.norm_output, c.norm_before_residual) == (True, False, True, True)


def test_fc_norm_and_default_ids_and_sliding_window(tmp_path, kimi_target):
    src = build_speculators_draft(tmp_path / "fcn", ids=None, norm_before_fc=False, fc_norm=True, sliding_window=2048)
    report = convert(src, tmp_path / "out", target=kimi_target)
    assert report.manifest.layer_ids == (1, 29, 57) and report.manifest.provenance["inferred"] is True
    out = load_file(str(tmp_path / "out" / "model.safetensors"))
    assert {f"fc_norm.{i}.weight" for i in range(3)} <= set(out)
    assert any("--speculative-draft-window-size 2048" in line for line in report.messages)
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (cfg["fc_norm"], cfg["norm_before_fc"], cfg["sliding_window"]) == (True, False, 2048)
    from sglang.srt.utils.hf_transformers_utils import get_config

    c = get_config(str(tmp_path / "out"), trust_remote_code=False)  # SGLang parses the carried SWA fields
    assert (c.fc_norm, c.sliding_window, c.layer_types) == (True, 2048, ["sliding_attention"])
