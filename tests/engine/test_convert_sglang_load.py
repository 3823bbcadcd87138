"""``convert``'s output loaded by SGLang 0.5.23's own ``ModelRunner`` / ``LlamaForCausalLMEagle3.load_weights`` in a
forked child; every SGLang parameter is compared with the source tensor it must come from (``torch.equal``)."""

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.doctor.convert import convert


@pytest.fixture(scope="module")
def converted(speculators_draft, kimi_target, tmp_path_factory):
    dst = tmp_path_factory.mktemp("conv") / "sglang_draft"
    return convert(speculators_draft, dst, target=kimi_target)


def test_sglang_own_loader_puts_every_source_tensor_in_place(converted, speculators_draft, forked, tmp_path):
    """SGLang's ModelRunner loads the converted draft (a forked child, support/sglang_side.py); every parameter equals
    its source tensor."""
    dump = tmp_path / "params.pt"
    rc, log = forked.call("support.sglang_side:parameters_to_file", converted.dst, dump)
    assert rc == 0, log[-3000:]
    got = torch.load(dump, weights_only=False)
    src = load_file(str(speculators_draft / "model.safetensors"))
    lay = {n[len("layers.0."):]: t for n, t in src.items() if n.startswith("layers.0.")}
    expected = {
        "model.embed_tokens.weight": src["embed_tokens.weight"],
        "model.fc.weight": src["fc.weight"],
        "model.input_norm.weight": src["input_norm.weight"],
        "model.layers.0.self_attn.qkv_proj.weight": torch.cat(
            [lay["self_attn.q_proj.weight"], lay["self_attn.k_proj.weight"], lay["self_attn.v_proj.weight"]]),
        "model.layers.0.self_attn.o_proj.weight": lay["self_attn.o_proj.weight"],
        "model.layers.0.mlp.gate_up_proj.weight": torch.cat([lay["mlp.gate_proj.weight"], lay["mlp.up_proj.weight"]]),
        "model.layers.0.mlp.down_proj.weight": lay["mlp.down_proj.weight"],
        "model.layers.0.input_layernorm.weight": lay["input_layernorm.weight"],
        "model.layers.0.post_attention_layernorm.weight": lay["post_attention_layernorm.weight"],
        "model.layers.0.hidden_norm.weight": lay["hidden_norm.weight"],
        "model.norm.weight": src["norm.weight"],
        "lm_head.weight": src["lm_head.weight"],
    }
    assert got.pop("<class>") == "LlamaForCausalLMEagle3"
    hot = got.pop("<hot_token_id>")
    assert torch.equal(hot, src["d2t"] + torch.arange(src["d2t"].shape[0]))
    assert set(got) == set(expected)  # no SGLang parameter is left at its initial value
    for name, t in expected.items():
        assert torch.equal(got[name], t), name
