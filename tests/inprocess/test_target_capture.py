"""The capture patch (core/sglang/target.py, core/capture.py) on SGLang 0.5.23's own DeepSeek-V3 (in-process
ModelRunner), HF transformers as reference.

Layer id ``k`` must be fed as HF ``output_hidden_states[k + 1]`` (``-1``: the embedding output, HF[0]), in
the listed order, whatever SGLang's ``layer_ids[0] == 1`` heuristic would have done.
"""

from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core.errors import DeploymentError
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM, hidden_state_index
from sglang_eagle3_capture.core.sglang import selfcheck
from sglang_eagle3_capture.core.sglang import target as target_patch
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds
from support.hf_reference import hf_hidden_states, hf_layer_outputs
from support.tolerances import TOLERANCES

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [100, 3, 200, 45, 17]]
TOL = TOLERANCES[torch.float32]


@pytest.fixture
def configure(runner):
    """``configure(ids)`` hands the model declared layer ids, as the patched resolution does."""
    with target_patch.patched():
        yield lambda ids: runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds(ids, "test manifest"))
    runner.reset_capture()


def _close(a, b) -> bool:
    return torch.allclose(a, b, **TOL)


@pytest.mark.parametrize("ids", [[-1, 1, 3], [3, -1, 1], [-1, 4], [4, -1, 0, 2]],
                         ids=["seed-shape", "non-ascending", "two-ids", "four-ids"])
def test_declared_ids_feed_hf_hidden_states_in_listed_order(runner, configure, hf_target, ids):
    configure(ids)
    assert runner.model.model.layers_to_capture == sorted(hidden_state_index(i) for i in ids)
    out = runner.prefill(PROMPTS)
    hidden = hf_target.config.hidden_size
    assert out.aux.shape == (sum(map(len, PROMPTS)), len(ids) * hidden)
    for prompt, rows in zip(PROMPTS, out.token_slices()):
        hf = hf_hidden_states(hf_target, prompt)
        for chunk, layer_id in zip(out.aux[rows].split(hidden, dim=-1), ids):
            expected = hf[hidden_state_index(layer_id)]
            if layer_id == -1:
                assert torch.equal(chunk, expected)  # the embedding: a lookup on both sides
            else:
                torch.testing.assert_close(chunk, expected, **TOL)
                # An off-by-one (SGLang's +1 question) must not pass the tolerance.
                assert not _close(chunk, hf[hidden_state_index(layer_id) - 1])
                assert not _close(chunk, hf[hidden_state_index(layer_id) + 1])


@pytest.mark.parametrize("ids", [[-1, 2, 5], [5, -1, 1], [5]], ids=["last-at-end", "last-first", "last-alone"])
def test_last_layer_output_is_fed_pre_norm(runner, configure, hf_target, ids):
    """Layer id N-1 (5 on this 6-layer target) is past SGLang's capture loop; it is taken at the final norm.

    It must equal HF's last decoder layer output before ``model.norm`` (HF's own ``hidden_states[N]`` is
    after it), in its listed place."""
    n = hf_target.config.num_hidden_layers
    assert n - 1 in ids
    configure(ids)
    assert runner.model.model.layers_to_capture == sorted(hidden_state_index(i) for i in ids if i != n - 1)
    out = runner.prefill(PROMPTS)
    hidden = hf_target.config.hidden_size
    assert out.aux.shape == (sum(map(len, PROMPTS)), len(ids) * hidden)
    for prompt, rows in zip(PROMPTS, out.token_slices()):
        hf = hf_layer_outputs(hf_target, prompt)
        hf_normed = hf_hidden_states(hf_target, prompt)[n]
        for chunk, layer_id in zip(out.aux[rows].split(hidden, dim=-1), ids):
            expected = hf[hidden_state_index(layer_id)]
            if layer_id == -1:
                assert torch.equal(chunk, expected)
                continue
            torch.testing.assert_close(chunk, expected, **TOL)
            assert not _close(chunk, hf[hidden_state_index(layer_id) - 1])
            if layer_id == n - 1:
                assert not _close(chunk, hf_normed)  # the post-norm value SGLang hands the LM head
                torch.testing.assert_close(out.hidden[rows], hf_normed, **TOL)  # and the LM head input is untouched


def _prefill_with_norm_output(runner, prompts):
    """The prefill, and the final norm's own output for it (``output[0]`` of ``norm(hidden, residual)``), taken by
    this test's hook, not the package's."""
    seen = []
    hook = runner.model.model.norm.register_forward_hook(
        lambda module, args, out: seen.append((out[0] if isinstance(out, tuple) else out).clone()))
    try:
        out = runner.prefill(prompts)
    finally:
        hook.remove()
    assert len(seen) == 1
    return out, seen[0]


@pytest.mark.parametrize("ids", [[-1, 1, FINAL_NORM], [FINAL_NORM, 5, -1], [-1, 1, 5]],
                         ids=["final-norm-last", "final-norm-first-beside-n-1", "n-1-pre-norm"])
def test_final_norm_is_fed_post_norm_and_n_minus_1_pre_norm(runner, configure, hf_target, ids):
    """``final_norm`` is the final norm's output: bit-equal to the tensor SGLang's norm computed (and to the LM head's
    input), within the tolerance of HF ``hidden_states[N]``; layer id N-1 stays the pre-norm state, which differs."""
    n = hf_target.config.num_hidden_layers
    configure(ids)
    assert runner.model.model.layers_to_capture == sorted(hidden_state_index(i) for i in ids
                                                           if i not in (n - 1, FINAL_NORM))
    out, normed = _prefill_with_norm_output(runner, PROMPTS)
    assert selfcheck.pending() == ()  # the first-batch self-check ran on this prefill and passed
    hidden = hf_target.config.hidden_size
    assert out.aux.shape == (sum(map(len, PROMPTS)), len(ids) * hidden)
    for prompt, rows in zip(PROMPTS, out.token_slices()):
        hf = hf_hidden_states(hf_target, prompt)  # [N] post-norm (transformers' last_hidden_state)
        pre = hf_layer_outputs(hf_target, prompt)  # [N] pre-norm
        for chunk, layer_id in zip(out.aux[rows].split(hidden, dim=-1), ids):
            if layer_id == FINAL_NORM:
                assert torch.equal(chunk, normed[rows])  # the norm module's output, routed, never recomputed
                assert torch.equal(chunk, out.hidden[rows])  # what the LM head reads
                torch.testing.assert_close(chunk, hf[n], **TOL)
                assert not _close(chunk, pre[n])
            elif layer_id == n - 1:
                torch.testing.assert_close(chunk, pre[n], **TOL)
                assert not _close(chunk, hf[n])  # pre-norm: not HF's hidden_states[N]
            elif layer_id == -1:
                assert torch.equal(chunk, hf[0])
            else:
                torch.testing.assert_close(chunk, hf[hidden_state_index(layer_id)], **TOL)


def test_last_layer_capture_is_released_on_reconfiguration_and_revert(runner, configure):
    configure([-1, 5])
    norm = runner.model.model.norm
    assert len(norm._forward_hooks) == 1
    configure([-1, 1])
    assert len(norm._forward_hooks) == 0  # the previous feed's hook is gone, nothing extra runs
    configure([5, -1])
    assert len(norm._forward_hooks) == 1
    configure([FINAL_NORM, 5, -1])  # one hook takes the norm's input and its output
    assert len(norm._forward_hooks) == 1
    configure([-1, 1])
    assert len(norm._forward_hooks) == 0
    configure([-1, FINAL_NORM])
    assert len(norm._forward_hooks) == 1
    target_patch.revert()
    assert len(norm._forward_hooks) == 0  # revert leaves no hook behind on a live model
    target_patch.apply()  # the fixture reverts on exit


def test_patched_capture_is_a_pure_reordering_of_stock_capture(runner, configure):
    # Stock SGLang, loop indices [0, 2, 4] (first id 0: no +1), through the patched method's stock path.
    runner.model.set_eagle3_layers_to_capture([0, 2, 4])
    stock = runner.prefill(PROMPTS).aux
    configure([3, -1, 1])  # loop indices 4, 0, 2
    ours = runner.prefill(PROMPTS).aux
    h = stock.shape[-1] // 3
    s0, s2, s4 = stock.split(h, dim=-1)
    assert torch.equal(ours, torch.cat([s4, s0, s2], dim=-1))


def test_captured_embedding_survives_in_place_writes_to_the_residual(runner, configure, hf_target, monkeypatch):
    """Loop index 0 captures the residual stream at layer 0, which IS the embedding output tensor
    (residual/add_norm.py init_residual returns it); on CUDA the fused add-RMSNorm later writes that
    residual in place. The captured value must be a copy."""
    from sglang.srt.layers.aux_hidden_states import AuxHiddenStatePacker

    seen = {}
    original_capture = AuxHiddenStatePacker.capture

    def spy(self, hidden, *, owned=False):
        seen.setdefault("first", hidden)
        return original_capture(self, hidden, owned=owned)

    monkeypatch.setattr(AuxHiddenStatePacker, "capture", spy)
    embed = runner.model.model.embed_tokens
    layer1 = runner.model.model.layers[1]

    def clobber(module, args):  # after layer 0 ran: write the residual storage in place, as add-norm would
        seen["embedding"].add_(1000.0)

    hooks = [embed.register_forward_hook(lambda m, a, out: seen.__setitem__("embedding", out)),
             layer1.register_forward_pre_hook(clobber)]
    configure([-1, 1, 3])
    try:
        out = runner.prefill(PROMPTS[:1])
    finally:
        for h in hooks:
            h.remove()
    assert seen["first"].data_ptr() == seen["embedding"].data_ptr()  # the hazard is real: capture got that storage
    hf = hf_hidden_states(hf_target, PROMPTS[0])
    assert not torch.equal(seen["embedding"], hf[0])  # the write happened
    assert torch.equal(out.aux[:, : hf[0].shape[-1]], hf[0])  # the captured embedding did not change


def test_kimi_k25_delegates_to_the_patched_method(runner, configure, hf_target):
    # KimiK25ForConditionalGeneration builds DeepseekV3ForCausalLM by direct import (models/kimi_k25.py) and
    # forwards set_eagle3_layers_to_capture to it: call its real method with that language model.
    from sglang.srt.models import deepseek_v2, kimi_k25

    assert kimi_k25.DeepseekV3ForCausalLM is deepseek_v2.DeepseekV3ForCausalLM
    kimi = SimpleNamespace(language_model=runner.model)
    with target_patch.patched():
        kimi_k25.KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture(kimi, DeclaredLayerIds([1, -1], "kimi"))
    assert runner.model.model.layers_to_capture == [0, 2]
    out = runner.prefill(PROMPTS[:1])
    hf = hf_hidden_states(hf_target, PROMPTS[0])
    h = hf[0].shape[-1]
    torch.testing.assert_close(out.aux[:, :h], hf[2], **TOL)
    assert torch.equal(out.aux[:, h:], hf[0])


def test_unpatched_model_refuses_declared_ids(runner):
    # A failed patch must not let SGLang's heuristic reinterpret declared ids silently.
    assert not target_patch.is_patched()
    with pytest.raises(DeploymentError) as e:
        runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds([-1, 1, 3], "draft/eagle3_manifest.json"))
    assert (e.value.file, e.value.field) == ("draft/eagle3_manifest.json", None)
    assert "unpatched set_eagle3_layers_to_capture" in e.value.problem and "SGLANG_PLUGINS" in e.value.fix
    runner.reset_capture()


def test_no_feed_on_the_hot_path_for_ascending_ids_without_dump(runner, configure, monkeypatch):
    monkeypatch.delenv("SGLANG_EAGLE3_CAPTURE_DUMP", raising=False)
    configure([-1, 1, 3])
    assert runner.model.model._eagle3_capture_feed is None
    configure([1, -1, 3])
    assert runner.model.model._eagle3_capture_feed is not None
