"""A torch-only, DeepSeek-shaped stand-in for an SGLang target, wired to the package's real capture code (CapturePlan,
FcFeed) and first-batch self-check (core/sglang/selfcheck.py), for machines and tests without SGLang.

It reproduces what the self-check depends on in SGLang, not SGLang itself:

- decoder layers whose input and post-attention norms add the residual **in place** (``sgl_kernel.fused_add_rmsnorm``
  semantics: ``residual = (T)(float(x) + float(residual))``, then ``x = norm``), as a Triton kernel on CUDA (the
  arithmetic of flashinfer's ``FusedAddRMSNorm``) and in torch elsewhere;
- ``forward_with_allreduce_fusion`` on the norms (the TP > 1 all-reduce + add + norm kernel, a method that fires no
  module hook; at one rank the all-reduce is the identity) and ``fused=True`` to take that path;
- ``forward_batch.residual_stream.residual`` holding the residual a layer's attention starts with (0.5.21+);
- a capture loop that copies the residual entering layer ``i`` for each loop index ``i`` in ``layers_to_capture``
  into one packed tensor (ascending), and the plugin's ``FcFeed`` putting it in fc order, the last layer's output
  taken by its hook on the final norm;
- :class:`Runner`, whose ``forward(forward_batch)`` stands in for ``ModelRunner.forward`` behind the self-check's
  gate (:func:`sglang_eagle3_capture.core.sglang.selfcheck.checked`).

Used by benchmarks/gpu_check.py (on a GPU without SGLang) and tests/unit/test_selfcheck_unit.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sglang_eagle3_capture.core.capture import FcFeed, plan_capture  # noqa: E402
from sglang_eagle3_capture.core.families import all_families  # noqa: E402
from sglang_eagle3_capture.core.sglang import selfcheck  # noqa: E402

try:
    import triton
    import triton.language as tl
except Exception:  # noqa: BLE001 - no triton: the torch path
    triton = None

if triton is not None:

    @triton.jit
    def _fused_add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, n_cols, eps, BLOCK: tl.constexpr):
        # flashinfer norm.cuh FusedAddRMSNorm: x = float(input) + float(residual); residual = (T)x;
        # input = (T)(x * rsqrt(mean(x^2) + eps) * weight); both written in place.
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        s = x + r
        tl.store(r_ptr + row * n_cols + cols, s.to(r_ptr.dtype.element_ty), mask=mask)
        var = tl.sum(s * s, axis=0) / n_cols
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(x_ptr + row * n_cols + cols, (s * tl.rsqrt(var + eps) * w).to(x_ptr.dtype.element_ty), mask=mask)


class AtenOps(TorchDispatchMode):
    """``with AtenOps() as rec: ...``; then ``rec.ops`` lists every aten op dispatched inside the block, in order:
    how the GPU check and the tests show that the forward after the self-check runs exactly the ops of a forward
    that never had one."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def use_triton(x: torch.Tensor) -> bool:
    """The Triton kernel runs on CUDA tensors by default (``kernel=True`` runs it interpreted on CPU under
    ``TRITON_INTERPRET=1``, whose bf16 casts are emulated and may differ by one ulp)."""
    return triton is not None and x.is_cuda


def fused_add_rmsnorm_(x, residual, weight, eps=1e-6, kernel=None):
    """In place, like ``sgl_kernel.fused_add_rmsnorm``: residual = (T)(float(x) + float(residual)); x = norm."""
    if (use_triton(x) if kernel is None else kernel) and x.shape[0] > 0:
        _fused_add_rmsnorm_kernel[(x.shape[0],)](x, residual, weight, x.shape[-1], eps,
                                                 BLOCK=triton.next_power_of_2(x.shape[-1]))
        return x, residual
    s = x.float() + residual.float()
    residual.copy_(s.to(residual.dtype))
    x.copy_((s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype))
    return x, residual


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def _norm(self, s):
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()

    def forward(self, x, residual=None, post_residual_addition=None):
        if residual is None:
            return self._norm(x.float()).to(x.dtype)
        return fused_add_rmsnorm_(x, residual, self.weight, self.eps)

    def forward_with_allreduce_fusion(self, x, residual, post_residual_addition=None, use_attn_tp_group=True):
        # flashinfer's all-reduce fusion: a fresh residual_out (one rank: the reduce is the identity)
        s = x.float() + residual.float()
        return self._norm(s).to(x.dtype), s.to(residual.dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, positions, hidden_states, forward_batch):
        return self.proj(hidden_states)


class Layer(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = Attention(hidden)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = nn.Linear(hidden, hidden, bias=False)

    def forward(self, positions, hidden, forward_batch, residual, capture=None, fused=False):
        if residual is None:  # layer 0: the embedding is the residual (SGLang's init_residual)
            residual, hidden = hidden, self.input_layernorm(hidden)
        elif fused:
            hidden, residual = self.input_layernorm.forward_with_allreduce_fusion(hidden, residual)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        forward_batch.residual_stream.residual = residual
        if capture is not None:
            capture.append(residual.clone())  # SGLang's packer copies the residual entering this layer
        hidden = self.self_attn(positions=positions, hidden_states=hidden, forward_batch=forward_batch)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden) * 0.5, residual


class Stack(nn.Module):
    """The decoder stack (``DeepseekV2Model``'s role): embed_tokens, layers, norm, layers_to_capture, and the
    plugin's feed slot. ``fused``: layers >= 1 take the all-reduce-fusion path (no input-norm module call)."""

    def __init__(self, vocab: int, hidden: int, n_layers: int, fused: bool = False):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Layer(hidden) for _ in range(n_layers))
        self.norm = RMSNorm(hidden)
        self.layers_to_capture: list = []
        self.fused = fused
        self._eagle3_capture_feed = None

    def _forward(self, input_ids, positions, forward_batch, input_embeds=None):
        hidden = self.embed_tokens(input_ids) if input_embeds is None else input_embeds
        residual, captures = None, []
        for i, layer in enumerate(self.layers):
            hidden, residual = layer(positions, hidden, forward_batch, residual,
                                     captures if i in self.layers_to_capture else None, fused=self.fused and i > 0)
        normed, _ = self.norm(hidden, residual)
        return (normed, torch.cat(captures, dim=-1)) if captures else normed

    def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
        out = self._forward(input_ids, positions, forward_batch, input_embeds)
        feed = self._eagle3_capture_feed
        return out if feed is None else feed(self, out, input_ids, positions, forward_batch)


FAMILY = next(f for f in all_families() if f.name == "deepseek_v2")  # the family whose shape the stand-in has


def configure(stack: Stack, layer_ids, where: str = "stand-in manifest") -> FcFeed:
    """What the capture patch's ``configure`` does to a stack: the plan, the loop, the feed."""
    plan = plan_capture(list(layer_ids), len(stack.layers), where=where)
    stack.layers_to_capture = list(plan.loop_indices)
    feed = FcFeed(plan, stack.layers_to_capture, None, len(stack.layers), model_name="Stack")
    feed.attach(stack)
    stack._eagle3_capture_feed = feed
    return feed


def arm(stack: Stack, release=None) -> "selfcheck.SelfCheck":
    """A pending self-check of ``stack`` (without SGLang's gate: :class:`Runner` calls ``selfcheck.checked``)."""
    from sglang_eagle3_capture.core import releases

    feed = stack._eagle3_capture_feed
    release = release or releases.newest()
    return selfcheck.watch(selfcheck.SelfCheck(stack, feed.plan, FAMILY, release.selfcheck_routes,
                                               num_hidden_layers=len(stack.layers), where=feed.plan.where))


def batch(input_ids: torch.Tensor, mode: str = "EXTEND") -> SimpleNamespace:
    """A ForwardBatch stand-in: the mode, the ids, and a residual stream."""
    return SimpleNamespace(forward_mode=SimpleNamespace(name=mode), input_ids=input_ids,
                           positions=torch.arange(input_ids.shape[0], device=input_ids.device),
                           residual_stream=SimpleNamespace(residual=None))


class Runner:
    """``ModelRunner.forward``'s role: one forward of the stack, behind the self-check's gate."""

    def __init__(self, stack: Stack):
        self.stack = stack

    def forward(self, forward_batch):
        return selfcheck.checked(forward_batch, lambda: self.stack(forward_batch.input_ids, forward_batch.positions,
                                                                   forward_batch))


def build(vocab=256, hidden=96, n_layers=7, layer_ids=(3, -1, 6, 0), dtype=torch.float32, device="cpu",
          fused=False, seed=0) -> Stack:
    """A seeded stand-in stack configured for ``layer_ids``."""
    torch.manual_seed(seed)
    stack = Stack(vocab, hidden, n_layers, fused=fused)
    with torch.no_grad():
        for p in stack.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.5 if p.shape[0] == vocab else hidden ** -0.5)
            else:
                p.uniform_(0.5, 1.5)
    stack = stack.to(device=device, dtype=dtype).eval()
    configure(stack, layer_ids)
    return stack
