"""The one table of numeric tolerances for comparing SGLang against HF transformers.

Use ``torch.testing.assert_close(actual, expected, **TOLERANCES[dtype])``. Where code only routes
tensors (no arithmetic), compare with ``torch.equal`` instead.

fp32: SGLang and HF run the same math in a different order (absorbed MLA vs. HF's attention, fused MoE
accumulation), a few float32 ulps per layer. On the 6-layer tiny target (tests/tiny_models.py) the
largest difference seen was 8e-6 on hidden states of magnitude up to ~4 (prompts up to 60 tokens), while
neighbouring layers' hidden states differ by more than 1, so this bound cannot confuse two layers.
"""

import torch

TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
}

# vLLM's CPU build against HF (tests/engine/test_vllm_*.py): its own CPU GEMM and attention kernels, hidden 256. The
# largest difference seen was 2.2e-5 (Llama, layer id 1, 6 tokens, magnitudes up to ~4); neighbouring layers differ
# by more than 1, and the embedding (routed, no arithmetic) is compared with torch.equal.
VLLM_TOLERANCES = {
    torch.float32: dict(atol=1e-4, rtol=1e-3),
}
