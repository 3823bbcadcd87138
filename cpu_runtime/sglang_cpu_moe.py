"""CPU runtime (never shipped): SGLang's CPU MoE path for expert layouts its torch fallback does not handle (B12).

On a CPU without AMX an unquantized ``FusedMoE`` runs ``UnquantizedFusedMoEMethod.forward_cpu``, which calls
``layers/moe/fused_moe_native.py::moe_forward_native`` (unquant.py:1383-1390). That function covers GPT-OSS and the
plain SiLU experts, and two layouts the GPU Triton path (``moe_runner/triton_utils/fused_moe.py``) handles are wrong
there:

- SwiGLU-OAI with non-interleaved gate/up rows (``gate_up_interleaved=False``, MiniMax-M3: minimax_m3.py:438
  ``FusedMoE(..., gate_up_interleaved=False)``): ``moe_forward_native`` always applies GPT-OSS's interleaved
  ``swiglu_gpt_oss_sigmoid_alpha`` (even rows gate, odd rows up), so every expert computes another function; the
  Triton path picks ``swiglu_no_interleaved_with_alpha_and_limit`` (fused_moe.py:747-758).
- A token routed twice to one expert (LongCat-Flash: ``zero_experts_compute_triton`` maps every zero-expert pick to
  expert 0 with weight 0, ep_moe_kernels.py:1919-1923, so a token can list expert 0 twice): ``moe_forward_native``
  counts tokens per expert with ``scatter_`` (one per token) and then fails to put its outputs back
  (``shape mismatch``); the Triton kernels take every (token, slot) pair.

:func:`moe_forward_native` takes exactly those calls (the SiLU activations, no router weight on the input) and
computes each (token, slot) pair once: ``act(x @ w13[e].T (+ b13)) @ w2[e].T (+ b2)``, weighted by the slot's top-k
weight and summed in the weights' dtype as ``moe_forward_native`` sums, with SGLang's own activation functions
(``SiluAndMul`` or the two SwiGLU-OAI variants above); every other call goes to SGLang's function unchanged.
"""

from __future__ import annotations


def _takes(config, topk_ids) -> bool:
    if config.apply_router_weight_on_input or config.activation != "silu" or topk_ids.numel() == 0:
        return False
    odd_layout = config.gemm1_alpha is not None and not config.gate_up_interleaved
    repeated = bool((topk_ids.sort(dim=-1).values.diff(dim=-1) == 0).any())
    return odd_layout or repeated


def _activation(config):
    from sglang.srt.layers.activation import SiluAndMul
    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe

    if config.gemm1_alpha is None:
        return SiluAndMul()
    swiglu = (fused_moe.swiglu_gpt_oss_sigmoid_alpha if config.gate_up_interleaved
              else fused_moe.swiglu_no_interleaved_with_alpha_and_limit)
    return lambda gate_up: swiglu(gate_up, config.gemm1_alpha, config.gemm1_clamp_limit)


def patch_moe_forward_native(fused_moe_native_module):
    """B12: wrap ``moe_forward_native`` (see the module doc); idempotent."""
    m = fused_moe_native_module
    if getattr(m, "_sglang_cpu_runtime_moe_patched", False):
        return
    import torch
    import torch.nn.functional as F

    original = m.moe_forward_native

    def moe_forward_native(layer, x, topk_output, moe_runner_config):
        weights, ids, _ = topk_output
        if not _takes(moe_runner_config, ids):
            return original(layer, x, topk_output, moe_runner_config)
        act = _activation(moe_runner_config)
        b13, b2 = getattr(layer, "w13_weight_bias", None), getattr(layer, "w2_weight_bias", None)
        out = torch.zeros(x.shape, dtype=weights.dtype, device=x.device)
        for e in ids.unique().tolist():
            rows, slots = (ids == e).nonzero(as_tuple=True)
            h = act(F.linear(x[rows], layer.w13_weight[e], None if b13 is None else b13[e]))
            y = F.linear(h, layer.w2_weight[e], None if b2 is None else b2[e])
            out.index_add_(0, rows, y.to(weights.dtype) * weights[rows, slots, None])
        return out.to(x.dtype)

    m.moe_forward_native = moe_forward_native
    m._sglang_cpu_runtime_moe_patched = True
