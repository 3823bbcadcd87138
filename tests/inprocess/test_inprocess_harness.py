"""The in-process harness (support/sglang_inprocess.py) runs SGLang's real DeepSeek-V3 and its stock EAGLE-3 capture
on CPU, with the CPU runtime (cpu_runtime/) in effect.

Reference: HF transformers' DeepseekV3ForCausalLM on the same checkpoint. SGLang's capture loop index i
is the residual stream entering decoder layer i = HF ``output_hidden_states[i]``.
"""

import os
import sys
from pathlib import Path

import pytest
import sgl_kernel  # the CPU runtime's stub (tests/conftest.py put cpu_runtime/ first)
import sglang_cpu_patches
import torch

from support.hf_reference import hf_hidden_states
from support.tolerances import TOLERANCES

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [100, 3, 200, 45, 17]]
TOL = TOLERANCES[torch.float32]


@pytest.fixture
def capture(runner):
    """Call ``capture(ids)`` to configure stock capture; restored after the test."""
    yield runner.model.set_eagle3_layers_to_capture
    runner.reset_capture()


def _close(a, b) -> bool:
    return torch.allclose(a, b, **TOL)


@pytest.mark.parametrize("loop_indices", [[0, 2, 4], [0, 1, 5]])
def test_stock_capture_matches_hf_hidden_states(runner, capture, hf_target, loop_indices):
    capture(loop_indices)  # first id 0, so 0.5.23 applies no +1: these are the loop indices
    assert runner.model.model.layers_to_capture == loop_indices
    out = runner.prefill(PROMPTS)
    hidden = hf_target.config.hidden_size
    assert out.aux is not None and out.aux.shape == (sum(map(len, PROMPTS)), len(loop_indices) * hidden)
    for prompt, rows in zip(PROMPTS, out.token_slices()):
        hf = hf_hidden_states(hf_target, prompt)
        chunks = out.aux[rows].split(hidden, dim=-1)
        # Index 0 is the embedding output: a table lookup on both sides, bit-identical.
        assert torch.equal(chunks[0], hf[0])
        for chunk, index in zip(chunks[1:], loop_indices[1:]):
            torch.testing.assert_close(chunk, hf[index], **TOL)
            # The tolerance must tell neighbouring layers apart, or an off-by-one would pass.
            assert not _close(chunk, hf[index - 1]) and not _close(chunk, hf[index + 1])
        torch.testing.assert_close(out.hidden[rows], hf[-1], **TOL)  # after the final norm on both sides
    with torch.no_grad():
        expected_next = [int(hf_target(torch.tensor([p])).logits[0, -1].argmax()) for p in PROMPTS]
    assert out.next_token_ids == expected_next


def test_no_capture_returns_no_aux(runner):
    out = runner.prefill(PROMPTS[:1])
    assert out.aux is None and out.hidden.shape == (len(PROMPTS[0]), runner.model.config.hidden_size)


def test_stock_minus_one_layer_id_fails(runner, capture):
    """The bug this product fixes: SGLang 0.5.23 cannot capture the embedding as layer id -1 on DeepSeek.

    [-1, 2, 4]: the first id is not 1, so no +1 is applied; -1 never equals a loop index, so the packer
    gets 2 of 3 captures (sglang/srt/layers/aux_hidden_states.py, AuxHiddenStatePacker.finalize).
    """
    capture([-1, 2, 4])
    assert runner.model.model.layers_to_capture == [-1, 2, 4]
    with pytest.raises(RuntimeError, match="captured 2 of 3 aux hidden states"):
        runner.prefill(PROMPTS[:1])


def test_cpu_runtime_in_effect(runner):
    from sglang.srt.models.deepseek_common.attention_backend_handler import AttentionBackendRegistry
    from sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods import AttnForwardMethod
    from sglang.srt.utils import is_cpu

    assert Path(sgl_kernel.__file__).parent.parent == sglang_cpu_patches.SHIM_DIR  # the stub, not the CUDA wheel
    assert is_cpu() and os.environ["TRITON_INTERPRET"] == "1"
    assert AttentionBackendRegistry.get_handler("torch_native")(None, None) == AttnForwardMethod.MLA  # B1
    for name in ("sglang.srt.models.deepseek_common.attention_backend_handler",
                 "sglang.srt.layers.attention.torch_native_backend",
                 "sglang.srt.distributed.parallel_state"):  # B1, B3, B4 (B4 applied always, TP 1 too)
        assert sglang_cpu_patches.is_applied(sys.modules[name])
    assert type(runner.model_runner.attn_backend).__name__ == "TorchNativeAttnBackend"
