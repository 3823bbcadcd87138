"""The Gemma families without SGLang (docs/families.md, gemma3 and gemma4): the stream taken at the input norms for a
loop that captures a layer's branch output apart from its residual, the stock readings that say so, and a wrapper whose
decoder stack is its ``language_model``.

That SGLang's own Gemma 3 loop captures the branch output, and that the plugin's capture equals HF, is
tests/engine/test_families_capture.py (``[gemma3]``) and tests/engine/test_gemma3_stock.py.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core import families, releases, seams
from sglang_eagle3_capture.core.capture import CaptureError, FcFeed, plan_capture
from sglang_eagle3_capture.core.families import LIST, PACKED, Family
from sglang_eagle3_capture.core.families.schema import STREAM_FROM_INPUT_NORM
from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
from sglang_eagle3_capture.core.releases.schema import ALWAYS_SHIFT
from sglang_eagle3_capture.core.sglang import selfcheck, target
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds
from sglang_eagle3_capture.core.stock import stock_sglang_capture
from sglang_eagle3_capture.doctor import release_table
from sglang_eagle3_capture.doctor.readings import fail_closed_eagle_config_ids
from support.cli import run
from support.tiny_models import build_tiny_draft

N = 6


def eagle(ids):
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


# --- the stream at the input norms --------------------------------------------------------------------------------

class _FusedNorm(torch.nn.Module):
    """What Gemma3RMSNorm.forward_cuda does (layers/layernorm.py:1342-1351): with a residual, x becomes the normed
    output and residual becomes x + residual, both in place; without one, a new normed tensor."""

    def forward(self, x, residual=None):
        if residual is None:
            return x * 2
        residual.add_(x)
        x.copy_(residual * 2)
        return x, residual


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = _FusedNorm()


def _gemma3_loop(stack, emb, attn, branch):
    """Gemma3TextModel.forward's loop (gemma3_causal.py:632-679) over layers that return (branch, residual)
    unsummed (408-410): the stock list, the hidden states after the final norm."""
    aux, hidden, residual = [], emb, None
    for i, layer in enumerate(stack.layers):
        if i in stack.layers_to_capture:
            aux.append(hidden)
        if residual is None:
            residual = hidden
            layer.input_layernorm(hidden)
        else:
            _, residual = layer.input_layernorm(hidden, residual)
        residual.add_(attn[i])  # pre_feedforward_layernorm(hidden, residual): the fused in-place add
        hidden = branch[i].clone()  # post_feedforward_layernorm's output
    if N in stack.layers_to_capture:
        aux.append(hidden)
    normed, _ = stack.norm(hidden, residual)
    return (normed, aux) if aux else normed


def _streams(emb, attn, branch):
    """The residual stream entering each layer, HF's hidden_states[i], summed in the order the loop sums it."""
    out = [emb.clone()]
    for i in range(N):
        out.append((out[-1] + attn[i]) + branch[i])
    return out


def test_the_stream_is_taken_at_the_input_norms_before_a_fused_kernel_overwrites_it():
    torch.manual_seed(0)
    emb, attn, branch = torch.randn(5, 8), torch.randn(N, 5, 8), torch.randn(N, 5, 8)
    want = _streams(emb, attn, branch)
    plan = plan_capture([4, -1, 1, N - 1, "final_norm"], N, where="m.json")
    stack = SimpleNamespace(layers=[_Layer() for _ in range(N)], norm=_FusedNorm(),
                            layers_to_capture=list(plan.loop_indices))
    stock = SimpleNamespace(layers=stack.layers, norm=stack.norm, layers_to_capture=[0, 2, 5])
    normed, aux = _gemma3_loop(stock, emb.clone(), attn, branch)
    assert not torch.equal(aux[0], want[0]) and torch.equal(aux[0], want[N])  # in place: the last stream
    assert not any(torch.allclose(aux[c], want[i]) for c, i in ((1, 2), (2, 5)))  # the normed inputs
    feed = FcFeed(plan, stack.layers_to_capture, None, N, model_name="Gemma3TextModel",
                  stream_norms=("layers", "input_layernorm"))
    feed.attach(stack)
    out = feed(stack, _gemma3_loop(stack, emb.clone(), attn, branch), None, None, None)
    hidden = out[0]
    chunks = out[1].split(8, dim=-1)
    assert torch.equal(chunks[1], want[0])  # -1: layer 0's input, copied before layer 0 keeps it as its residual
    assert torch.equal(chunks[0], want[5]) and torch.equal(chunks[2], want[2])  # 4 and 1: x + residual at the norms
    assert torch.equal(chunks[3], want[N]) and torch.equal(chunks[4], hidden)  # N-1 and final_norm: the final norm
    assert torch.equal(hidden, want[N] * 2)
    feed.detach()
    assert not any(layer.input_layernorm._forward_pre_hooks for layer in stack.layers)


def test_a_stream_the_input_norm_hooks_did_not_take_is_refused():
    plan = plan_capture([-1, 1], N, where="m.json")
    stack = SimpleNamespace(layers=[_Layer() for _ in range(N)], layers_to_capture=list(plan.loop_indices))
    feed = FcFeed(plan, stack.layers_to_capture, None, N, model_name="Gemma3TextModel",
                  stream_norms=("layers", "input_layernorm"))
    feed.attach(stack)
    chunks = [torch.randn(3, 8), torch.randn(3, 8)]
    stack.layers[0].input_layernorm(torch.randn(3, 8))  # layer 2's norm never ran in this batch
    with pytest.raises(CaptureError) as e:
        feed(stack, (torch.zeros(3, 8), chunks), None, None, None)
    assert e.value.file == "m.json" and "layers[2]" in e.value.problem and e.value.fix
    stack.layers[0].input_layernorm(torch.randn(3, 8))
    stack.layers[2].input_layernorm(torch.randn(4, 8), torch.randn(4, 8))  # another batch's rows
    with pytest.raises(CaptureError):
        feed(stack, (torch.zeros(3, 8), chunks), None, None, None)


def test_the_family_table_takes_gemma3_streams_at_the_input_norms_only():
    assert [f.name for f in families.all_families() if f.stream_from == STREAM_FROM_INPUT_NORM] == ["gemma3"]
    gemma3 = families.family_of("Gemma3ForConditionalGeneration")
    assert gemma3.name == "gemma3" and families.family_of("Gemma3ForCausalLM") is gemma3
    with pytest.raises(ValueError):  # the stream replaces list chunks; a packed tensor has none to replace
        replace(gemma3, container=PACKED)
    assert gemma3.container == LIST


# --- stock readings -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("release", [r.version for r in releases.supported()])
def test_stock_gemma3_feeds_branch_outputs_for_every_id_from_0_on_every_supported_release(release):
    c = stock_sglang_capture(eagle([-1, 1, 4]), N, family="gemma3", release=release)
    assert c.fed_layer_ids == (-1, 1, 4) and c.problem is None and "[1, 4]" in c.mis_fed and "branch" in c.mis_fed
    last = stock_sglang_capture(eagle([-1, 1, N - 1]), N, family="gemma3", release=release)
    assert last.fed_layer_ids == (-1, 1, N - 1) and last.problem is None and last.mis_fed  # l.671-672 appends N
    assert stock_sglang_capture(eagle([-1]), N, family="gemma3", release=release).mis_fed is None  # the embedding
    gemma4 = stock_sglang_capture(eagle([-1, 1, N - 1]), N, family="gemma4", release=release)
    assert (gemma4.fed_layer_ids, gemma4.problem, gemma4.mis_fed) == ((-1, 1, N - 1), None, None)


def test_stock_gemma3_before_0_5_17_summed_the_stream():
    c = stock_sglang_capture(eagle([-1, 1, 4]), N, family="gemma3", release=release_table.get("0.5.15.post1"))
    assert c.fed_layer_ids == (-1, 1, 4) and c.mis_fed is None


def test_a_gemma3_manifest_with_a_layer_id_from_0_has_no_stock_expression():
    assert fail_closed_eagle_config_ids([-1, 1, 4], N, family="gemma3").exact is False
    assert fail_closed_eagle_config_ids([-1], N, family="gemma3").value == [-1]
    assert fail_closed_eagle_config_ids([-1, 1, 4], N, family="gemma4").value == [-1, 1, 4]


def _gemma3_draft(tmp_path, arch):
    target_dir = tmp_path / "gemma3"
    target_dir.mkdir()
    text = {"num_hidden_layers": N, "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 512,
            "vocab_size": 256}
    cfg = {"architectures": [arch], "text_config": text} if arch.endswith("Generation") else {"architectures": [arch],
                                                                                            **text}
    (target_dir / "config.json").write_text(json.dumps({**text, **cfg}))
    draft = build_tiny_draft(tmp_path / "draft", target_dir=target_dir, eagle_aux_layer_ids=[-1, 1, 4])
    write_manifest(draft, Manifest((-1, 1, 4), arch, N, 64, {"source": "manual"}))
    return draft, target_dir


@pytest.mark.parametrize("arch", ["Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"])
def test_inspect_calls_stock_gemma3_mis_wired_even_where_its_ids_match(tmp_path, capsys, arch):
    draft, target_dir = _gemma3_draft(tmp_path, arch)
    rc, out, err = run(capsys, "inspect", draft, "--target", target_dir, "--sglang", "0.5.23", "--stock", "--json")
    r = json.loads(out)
    assert rc == 1 and r["verdict"] == "mis-wired", err
    rows = {w["name"]: w for w in r["stock_sglang"]}
    assert rows["stock SGLang 0.5.23"]["layer_ids"] == [-1, 1, 4] and rows["stock SGLang 0.5.23"]["status"] == \
        "mis-wired" and "branch output" in rows["stock SGLang 0.5.23"]["problem"]
    assert rows["stock SGLang 0.5.15.post1"]["status"] == "consistent"
    assert "branch output" in r["summary"] and "silently mis-fed on every supported release" == r["stock_outcome"]


# --- a wrapper whose decoder stack is its language_model ----------------------------------------------------------

@pytest.fixture
def fake():
    m = types.ModuleType("fake_gemma_models")

    class Stack:
        def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
            return "hidden"

    class Wrapper:  # Gemma4ForConditionalGeneration: sets language_model.layers_to_capture itself
        def set_eagle3_layers_to_capture(self, layer_ids=None):
            self.language_model.layers_to_capture = [i + 1 for i in layer_ids]

    for cls in (Stack, Wrapper):
        cls.__module__ = m.__name__
        setattr(m, cls.__name__, cls)
    sys.modules[m.__name__] = m
    yield m
    del sys.modules[m.__name__]


def test_configure_finds_the_stack_the_family_table_names_for_a_wrapper(fake, monkeypatch):
    monkeypatch.setenv(selfcheck.ENV, "0")
    monkeypatch.setattr(target, "current_tp_rank", lambda: 0)
    family = Family(name="fake", architectures=("Wrapper",), causal_lms=((fake.__name__, "Wrapper"),),
                    models=((fake.__name__, "Stack"),), stock_rule=ALWAYS_SHIFT, text_config=("Wrapper",),
                    model_attrs=(("Wrapper", "language_model"),))
    patch = target.family_patch(family)
    wrapper = fake.Wrapper()
    wrapper.pp_group = SimpleNamespace(is_last_rank=True, world_size=1)
    wrapper.language_model = fake.Stack()
    wrapper.language_model.layers, wrapper.language_model.norm = [object()] * N, torch.nn.Identity()
    wrapper.config = SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=N))
    assert seams.apply(patch)
    try:
        fake.Wrapper.set_eagle3_layers_to_capture(wrapper, DeclaredLayerIds([4, -1], "m.json", family="fake"))
        assert wrapper.language_model.layers_to_capture == [0, 5] and wrapper.capture_aux_hidden_states
        assert target.decoder_stack(wrapper, family) is wrapper.language_model
        fake.Wrapper.set_eagle3_layers_to_capture(wrapper, [0, 1])  # stock wiring: SGLang's own method
        assert wrapper.language_model.layers_to_capture == [1, 2]
    finally:
        seams.revert(patch)
    gemma4 = families.family_of("Gemma4ForConditionalGeneration")
    assert gemma4.name == "gemma4" and gemma4.stack_attr("Gemma4ForConditionalGeneration") == "language_model"
    assert gemma4.stack_attr("Gemma4ForCausalLM") == "model"
