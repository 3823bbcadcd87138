"""The one table of numeric tolerances for comparing SGLang against HF transformers.

Use ``torch.testing.assert_close(actual, expected, **TOLERANCES[dtype])``. Where code only routes
tensors (no arithmetic), compare with ``torch.equal`` instead.

fp32: SGLang and HF run the same math in a different order (fused/absorbed MLA vs. HF's attention,
different MoE accumulation), which gives differences of a few float32 ulps per layer, so the bound is a
small multiple of float32 eps (1.2e-7) relative to hidden-state magnitudes of order 1.
"""

import torch

TOLERANCES = {
    torch.float32: dict(atol=1e-5, rtol=1e-4),
}
