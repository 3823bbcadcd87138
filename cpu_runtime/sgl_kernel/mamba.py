"""Stand-in for ``sgl_kernel.mamba`` (the compiled CPU sgl-kernel's linear-attention functions): SGLang's GDN backend
imports ``causal_conv1d_fn_cpu``/``causal_conv1d_update_cpu`` (layers/attention/linear/gdn_backend.py:184) and its
kernel ``chunk_gated_delta_rule_cpu`` (linear/kernels/gdn_triton.py:28) from here on CPU. The torch versions and what
each computes: cpu_runtime/sglang_cpu_linear_attn.py (L7-L9)."""

from sglang_cpu_linear_attn import causal_conv1d_fn_cpu, causal_conv1d_update_cpu, chunk_gated_delta_rule_cpu

__all__ = ["causal_conv1d_fn_cpu", "causal_conv1d_update_cpu", "chunk_gated_delta_rule_cpu"]
