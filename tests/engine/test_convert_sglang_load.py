"""``convert``'s output loaded by SGLang 0.5.23's own ``ModelRunner`` / ``LlamaForCausalLMEagle3.load_weights`` in a
subprocess; every SGLang parameter is compared with the source tensor it must come from (``torch.equal``)."""

import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file

from sglang_eagle3_capture.doctor.convert import convert
from support import subprocess_env


@pytest.fixture(scope="module")
def converted(speculators_draft, kimi_target, tmp_path_factory):
    dst = tmp_path_factory.mktemp("conv") / "sglang_draft"
    return convert(speculators_draft, dst, target=kimi_target)


# Run with support.subprocess_env(): the CPU runtime, and tests/ on PYTHONPATH for the in-process runner.
SGLANG_LOAD = textwrap.dedent('''
    import sys, torch
    from harness.sglang_inprocess import get_runner
    model = get_runner(sys.argv[1]).model
    out = {n: p.detach().clone() for n, p in model.named_parameters()}
    out["<class>"] = type(model).__name__
    out["<hot_token_id>"] = model.hot_token_id
    torch.save(out, sys.argv[2])
''')


def test_sglang_own_loader_puts_every_source_tensor_in_place(converted, speculators_draft, tmp_path):
    """SGLang 0.5.23's ModelRunner loads the converted draft; every parameter equals its source tensor."""
    dump = tmp_path / "params.pt"
    proc = subprocess.run([sys.executable, "-c", SGLANG_LOAD, str(converted.dst), str(dump)], env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
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
