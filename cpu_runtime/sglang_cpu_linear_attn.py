"""Torch stand-ins for the sgl-kernel CPU ops that SGLang's hybrid linear-attention models call (never shipped).

Qwen3.5 (models/qwen3_5.py) and Qwen3-Next (models/qwen3_next.py) alternate Gated DeltaNet (linear attention) layers
with gated full-attention layers. With ``SGLANG_USE_CPU_ENGINE=1`` SGLang takes their CPU branches, which call ops of
the compiled CPU sgl-kernel (AMX/AVX-512, source-only: cpu_runtime/sgl_kernel is a stub). SGLang has no torch
linear-attention path to route to instead: the GDN backend (layers/attention/linear/gdn_backend.py:183-188) and its
kernel (linear/kernels/gdn_triton.py:27-32) bind the CPU ops whenever ``is_cpu()``, and every other choice of
``--linear-attn-backend`` is CUDA/NPU/XPU only (``GDNKernelDispatcher``, gdn_backend.py:251-337). So each op below is
written in torch, for the shapes and the in-place effects SGLang's call site relies on, computing what SGLang's own
non-CPU implementation of the same call computes (named per op). Everything is computed in fp32 and rounded once to
the output dtype, as those kernels accumulate.

``torch.ops.sgl_kernel.*`` (:func:`register`, defined with ``torch.library`` in the ``sgl_kernel`` namespace):

L1  ``fused_sigmoid_mul_cpu(x!, gate)``: ``x *= sigmoid(gate)``, the output gate of Qwen3.5's full attention
    (qwen3_5.py:283-290, called at 1639). SGLang's own: ``kernels/ops/elementwise/elementwise.fused_sigmoid_mul``.
L2  ``fused_qk_gemma_rmsnorm_cpu(q, k, wq, wk, eps, head_dim) -> (q, k)``: per-head GemmaRMSNorm of q and k,
    ``x * rsqrt(mean(x^2) + eps) * (1 + w)`` (qwen3_5.py:292, called at 1446 when the attention has no output gate).
    SGLang's own: ``GemmaRMSNorm.forward_native`` (layers/layernorm.py), the path of ``forward_prepare_native``.
L3  ``fused_qk_gemma_rmsnorm_with_gate_cpu(q_gate, k, wq, wk, eps, head_dim, num_head) -> (q, k, gate)``: q_gate
    holds ``[q_h | gate_h]`` per head; q and k as L2, the gate split off unchanged (qwen3_5.py:293-295, called at
    1527 in ``forward_prepare_fused_gate``). SGLang's own: ``forward_prepare_native`` (1493-1514): chunk per head,
    then L2's norm.
L4  ``fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz, ba, hk, hv, dk, dv) -> (qkv, z, b, a)``: Qwen3.5's
    projections ``[q | k | v | z]`` and ``[b | a]`` split into ``qkv`` (z stripped), ``z`` ``[T, hv, dv]``, ``b``,
    ``a`` (qwen3_5.py:296-298, called at 1046). SGLang's own: ``qwen3_5_gdn_prefill_projection_views``
    (kernels/ops/attention/triton_gdn_fused_proj.py:344-359), the same split as views.
L5  ``fused_gdn_gating_cpu(A_log, a, b, dt_bias) -> (g, beta)``: ``g = -exp(A_log) * softplus(a + dt_bias)``
    (threshold 20), ``beta = sigmoid(b)``, both ``[1, T, HV]`` fp32 (gdn_backend.py:188, called at 946 and 1348).
    SGLang's own: ``kernels/ops/attention/linear/fused_gdn_gating.fused_gdn_gating`` (Triton).
L6  ``fused_sigmoid_gating_delta_rule_update_cpu(...) -> o``: the recurrent gated delta rule for decode (one token
    per sequence) and target verify (``draft_token_num`` tokens per sequence): gates as L5, q and k l2-normalised,
    ``q *= K^-0.5``; per token ``h *= exp(g); v' = beta * (v - k.h); h += k v'^T; o = q.h``; the state read from
    ``initial_state_source[initial_state_indices[n]]`` (``[HV, V, K]``), written back unless
    ``disable_state_update``; with ``intermediate_states_buffer`` the state after step ``t`` is stored at
    ``[intermediate_state_indices[n], t]`` (gdn_triton.py:30-32, called at 153 and 236). SGLang's own:
    ``kernels/ops/attention/linear/fused_sigmoid_gating_recurrent.fused_sigmoid_gating_delta_rule_update``
    (Triton, 538-765). Token trees (``retrieve_parent_token``) are refused: topk 1 only.

``sgl_kernel.mamba`` (cpu_runtime/sgl_kernel/mamba.py re-exports these; gdn_backend.py:184, gdn_triton.py:28):

L7  ``causal_conv1d_fn_cpu(x [dim, T], weight [dim, W], bias, ...) -> [dim, T]``: the depthwise causal conv of each
    sequence of the batch, started from ``conv_states[cache_indices[i]]`` when ``has_initial_state[i]`` (else
    zeros), SiLU, and the last ``W - 1`` inputs written back to that slot (gdn_backend.py:929-940). SGLang's own:
    ``kernels/ops/mamba/causal_conv1d_triton.causal_conv1d_fn`` (408-466).
L8  ``causal_conv1d_update_cpu(x [B, dim] or [B, dim, S], conv_state, weight, bias, activation, ...)``: the same conv
    continued from each slot's window for S new tokens; the slot gets the last ``W - 1`` inputs; with
    ``intermediate_conv_window`` the window after each token is stored at ``[intermediate_state_indices[b], t]``
    (gdn_backend.py:855-862 decode, 1047-1059 verify). SGLang's own: ``causal_conv1d_triton.causal_conv1d_update``
    (1021-1231; a chain, no token tree).
L9  ``chunk_gated_delta_rule_cpu(q, k, v, g, beta, initial_state, cu_seqlens, head_first,
    use_qk_l2norm_in_kernel, initial_state_indices) -> (o, final_state, None)``: L6's recurrence per sequence of a
    prefill batch with the gates given, the final state written to its pool slot in place (gdn_triton.py:169-214;
    the caller discards the returned state, gdn_backend.py:1180-1199). SGLang's own:
    ``kernels/ops/attention/fla/chunk.chunk_gated_delta_rule`` (Triton, chunked; the same function of its inputs).

L10 (patches, not ops) the gated RMSNorm after the delta rule: ``RMSNorm.forward`` of
    kernels/ops/attention/fla/layernorm_gated.py (Qwen3.5, qwen3_5.py:507) and ``FusedRMSNormGated.forward`` of
    fla/fused_norm_gate.py (Qwen3-Next, qwen3_next.py:244): without AMX SGLang calls its Triton kernels there
    (layernorm_gated.py:529-539, fused_norm_gate.py:450-460), which need a CUDA device (``_get_sm_count``). We route
    both to SGLang's own torch reference of the same function, ``layernorm_gated.rms_norm_ref`` (41-72):
    ``x * rsqrt(mean(x^2) + eps) * w * silu(z)`` (norm before gate; SiLU only, else refused).
L11 (a patch) ``Qwen3GatedDeltaNet.__init__`` (qwen3_next.py:229-254) creates its norm on
    ``torch.get_device_module().current_device()``: a CUDA build of torch on a machine without a GPU names CUDA there
    and fails (a CPU build names cpu); during that ``__init__`` only, ``torch.get_device_module()`` without a
    device returns ``torch.cpu``.
L12 (a patch) the commit of the accepted draft steps after a target verify:
    ``scatter_mamba_states_after_mtp_verify`` (kernels/ops/mamba/mamba_state_scatter_triton.py:781-849, called from
    ``HybridLinearAttnBackend.update_mamba_state_after_mtp_verify``, hybrid_linear_attn_backend.py:1601) copies each
    request's state after its last accepted step from the verify scratch (``intermediate_ssm``,
    ``intermediate_conv_window``) into its pool slot through Triton kernels that refuse non-CUDA tensors (344, 509).
    On CPU tensors ``fused_mamba_state_scatter_with_mask``, ``fused_conv_window_scatter_with_mask`` and
    ``fused_conv_window_scatter_multi`` of that module run SGLang's own torch version of the same masked scatter,
    ``HybridLinearAttnBackend._scatter_speculative_state_with_mask`` (hybrid_linear_attn_backend.py:1619-1657:
    ``dst[:, dst[i]] = src[:, src_row[i], step[i]]`` for every request with ``step >= 0``).

Not stood in for (SGLang calls them only with AMX): ``fused_input_proj_cpu`` (qwen3_5.py:899), Qwen3-Next's
``fused_qkvzba_split_reshape_cat_cpu`` (qwen3_next.py:465), ``fused_rmsnorm_gated_cpu`` (fla/layernorm_gated.py:525);
without AMX SGLang uses its own torch or Triton code there. Checked against transformers' torch implementations
(tests/unit/test_cpu_linear_attn.py) and, in process, SGLang's whole models against HF's
(tests/engine/test_families_capture.py).
"""

from __future__ import annotations

_LIB: list = []  # the torch.library.Library holding the definitions (it must stay alive)

SCHEMAS = {
    "fused_sigmoid_mul_cpu": "(Tensor(a!) input, Tensor gate) -> ()",
    "fused_qk_gemma_rmsnorm_cpu": "(Tensor q, Tensor k, Tensor q_weight, Tensor k_weight, float eps, int head_dim) "
                                  "-> (Tensor, Tensor)",
    "fused_qk_gemma_rmsnorm_with_gate_cpu": "(Tensor q_gate, Tensor k, Tensor q_weight, Tensor k_weight, float eps, "
                                            "int head_dim, int num_head) -> (Tensor, Tensor, Tensor)",
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": "(Tensor mixed_qkvz, Tensor mixed_ba, int num_heads_qk, "
                                                     "int num_heads_v, int head_qk, int head_v) "
                                                     "-> (Tensor, Tensor, Tensor, Tensor)",
    "fused_gdn_gating_cpu": "(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) -> (Tensor, Tensor)",
    "fused_sigmoid_gating_delta_rule_update_cpu": (
        "(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, Tensor a, Tensor b, "
        "Tensor(a!) initial_state_source, Tensor initial_state_indices, Tensor? cu_seqlens=None, "
        "bool use_qk_l2norm_in_kernel=False, float softplus_beta=1.0, float softplus_threshold=20.0, "
        "bool is_kda=False, bool disable_state_update=False, Tensor(b!)? intermediate_states_buffer=None, "
        "Tensor? intermediate_state_indices=None, int? cache_steps=None, Tensor? retrieve_parent_token=None) "
        "-> Tensor"),
}


def _rms(x, eps):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def gemma_rmsnorm_per_head(x, weight, eps: float, head_dim: int):
    """``x`` ``[T, H * head_dim]`` normalised per head as GemmaRMSNorm.forward_native: fp32, ``(1 + w)``."""
    shape, dtype = x.shape, x.dtype
    out = _rms(x.float().reshape(-1, head_dim), eps) * (1.0 + weight.float())
    return out.to(dtype).reshape(shape)


def fused_sigmoid_mul(x, gate) -> None:
    """L1: ``x *= sigmoid(gate)`` in place."""
    import torch

    x.copy_((x.float() * torch.sigmoid(gate.float())).view(x.shape).to(x.dtype))


def fused_qk_gemma_rmsnorm(q, k, q_weight, k_weight, eps: float, head_dim: int):
    """L2."""
    return gemma_rmsnorm_per_head(q, q_weight, eps, head_dim), gemma_rmsnorm_per_head(k, k_weight, eps, head_dim)


def fused_qk_gemma_rmsnorm_with_gate(q_gate, k, q_weight, k_weight, eps: float, head_dim: int, num_head: int):
    """L3: ``q_gate`` ``[T, num_head * 2 * head_dim]``, per head ``[q_h | gate_h]``; returns ``[T, H * D]`` each."""
    t = q_gate.shape[0]
    q, gate = q_gate.reshape(t, num_head, 2 * head_dim).split(head_dim, dim=-1)
    q = gemma_rmsnorm_per_head(q.reshape(t, -1), q_weight, eps, head_dim)
    return q, gemma_rmsnorm_per_head(k, k_weight, eps, head_dim), gate.reshape(t, -1).contiguous()


def fused_qkvzba_split_reshape_cat_contiguous(mixed_qkvz, mixed_ba, num_heads_qk: int, num_heads_v: int,
                                              head_qk: int, head_v: int):
    """L4: ``[q | k | v | z]``, ``[b | a]`` -> ``qkv`` ``[T, 2*hk*dk + hv*dv]``, ``z`` ``[T, hv, dv]``, ``b``, ``a``."""
    t = mixed_qkvz.shape[0]
    qkv_dim = 2 * num_heads_qk * head_qk + num_heads_v * head_v
    return (mixed_qkvz[:, :qkv_dim].contiguous(), mixed_qkvz[:, qkv_dim:].reshape(t, num_heads_v, head_v).contiguous(),
            mixed_ba[:, :num_heads_v].contiguous(), mixed_ba[:, num_heads_v:2 * num_heads_v].contiguous())


def gdn_gating(A_log, a, b, dt_bias, softplus_beta: float = 1.0, softplus_threshold: float = 20.0):
    """L5: ``(g, beta)``, fp32, the shape of ``a``."""
    import torch
    import torch.nn.functional as F

    g = -torch.exp(A_log.float()) * F.softplus(a.float() + dt_bias.float(), beta=softplus_beta,
                                                threshold=softplus_threshold)
    return g, torch.sigmoid(b.float())


def fused_gdn_gating(A_log, a, b, dt_bias):
    """L5 as the op: ``[1, T, HV]`` each."""
    g, beta = gdn_gating(A_log, a, b, dt_bias)
    return g.unsqueeze(0), beta.unsqueeze(0)


def _l2norm(x, eps: float = 1e-6):
    import torch

    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def delta_rule_steps(q, k, v, g, beta, state, *, use_qk_l2norm: bool, scale: float | None = None):
    """The gated delta rule over the tokens of one sequence, in fp32.

    ``q``/``k`` ``[T, H, K]``, ``v`` ``[T, HV, V]`` (HV a multiple of H: value head ``i`` uses key head
    ``i // (HV // H)``), ``g``/``beta`` ``[T, HV]``, ``state`` ``[HV, V, K]`` (SGLang's pool layout). Returns the
    outputs ``[T, HV, V]`` and the state after each token ``[T, HV, V, K]``, fp32."""
    import torch

    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    rep = v.shape[1] // q.shape[1]
    if rep > 1:
        q, k = q.repeat_interleave(rep, dim=1), k.repeat_interleave(rep, dim=1)
    if use_qk_l2norm:
        q, k = _l2norm(q), _l2norm(k)
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    h = state.float().clone()
    outs, states = [], []
    for t in range(q.shape[0]):
        h = h * torch.exp(g[t])[:, None, None]
        delta = (v[t] - (h * k[t][:, None, :]).sum(-1)) * beta[t][:, None]  # [HV, V]
        h = h + delta[:, :, None] * k[t][:, None, :]
        outs.append((h * q[t][:, None, :]).sum(-1))
        states.append(h)
    empty = v.new_zeros((0, *v.shape[1:]))
    return (torch.stack(outs) if outs else empty), (torch.stack(states) if states else h.new_zeros((0, *h.shape)))


def _bounds(cu_seqlens, n: int, tokens: int):
    if cu_seqlens is None:
        return [(i * tokens, (i + 1) * tokens) for i in range(n)]
    cu = [int(c) for c in cu_seqlens.tolist()]
    return list(zip(cu[:-1], cu[1:]))


def fused_sigmoid_gating_delta_rule_update(A_log, dt_bias, q, k, v, a, b, initial_state_source, initial_state_indices,
                                           cu_seqlens=None, use_qk_l2norm_in_kernel=False, softplus_beta=1.0,
                                           softplus_threshold=20.0, is_kda=False, disable_state_update=False,
                                           intermediate_states_buffer=None, intermediate_state_indices=None,
                                           cache_steps=None, retrieve_parent_token=None):
    """L6: ``q``/``k`` ``[1, T, H, K]``, ``v`` ``[1, T, HV, V]``, ``a``/``b`` ``[T, HV]``; returns ``[1, T, HV, V]``."""
    if is_kda or retrieve_parent_token is not None:
        raise NotImplementedError("cpu_runtime L6: KDA and token-tree verify (topk > 1) are not stood in for")
    g, beta = gdn_gating(A_log, a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1]), dt_bias, softplus_beta,
                         softplus_threshold)
    n = initial_state_indices.shape[0]
    out = v.new_zeros(v.shape)
    pool, steps = initial_state_source, None
    if intermediate_states_buffer is not None:  # [slots, steps, HV, V, K] (the Triton kernel's addressing)
        steps = intermediate_states_buffer.view(intermediate_states_buffer.shape[0], -1, *pool.shape[1:])
    for i, (s, e) in enumerate(_bounds(cu_seqlens, n, q.shape[1] // max(n, 1))):
        idx = int(initial_state_indices[i])
        state = pool[idx] if idx >= 0 else pool.new_zeros(pool.shape[1:])
        o, hs = delta_rule_steps(q[0, s:e], k[0, s:e], v[0, s:e], g[s:e], beta[s:e], state,
                                 use_qk_l2norm=use_qk_l2norm_in_kernel)
        out[0, s:e] = o.to(out.dtype)
        if steps is not None and int(intermediate_state_indices[i]) >= 0:
            steps[int(intermediate_state_indices[i]), : e - s] = hs.to(steps.dtype)
        if not disable_state_update and idx >= 0 and e > s:
            pool[idx] = hs[-1].to(pool.dtype)
    return out


def chunk_gated_delta_rule_cpu(q, k, v, g, beta, initial_state, cu_seqlens, head_first=False,
                               use_qk_l2norm_in_kernel=False, initial_state_indices=None, **kwargs):
    """L9: ``q``/``k`` ``[1, T, H, K]``, ``v`` ``[1, T, HV, V]``, ``g``/``beta`` ``[1, T, HV]``; ``initial_state`` is
    the state pool, ``initial_state_indices`` each sequence's slot (updated in place)."""
    import torch

    if head_first:
        raise NotImplementedError("cpu_runtime L9: head_first is not supported (SGLang passes False)")
    out = v.new_zeros(v.shape)
    finals = []
    for i, (s, e) in enumerate(_bounds(cu_seqlens, initial_state_indices.shape[0], 0)):
        idx = int(initial_state_indices[i])
        o, hs = delta_rule_steps(q[0, s:e], k[0, s:e], v[0, s:e], g[0, s:e], beta[0, s:e], initial_state[idx],
                                 use_qk_l2norm=use_qk_l2norm_in_kernel)
        out[0, s:e] = o.to(out.dtype)
        final = hs[-1] if e > s else initial_state[idx].float()
        initial_state[idx] = final.to(initial_state.dtype)
        finals.append(final)
    return out, torch.stack(finals) if finals else None, None


def _conv(window, weight, bias, activation):
    """``window`` ``[dim, W - 1 + S]`` fp32 -> ``[dim, S]``: output ``t`` from columns ``t .. t + W - 1``."""
    import torch.nn.functional as F

    out = F.conv1d(window.unsqueeze(0), weight.float().unsqueeze(1), None if bias is None else bias.float(),
                   groups=window.shape[0]).squeeze(0)
    if activation in ("silu", "swish", True):
        out = F.silu(out)
    elif activation not in (None, False):
        raise NotImplementedError(f"cpu_runtime L7/L8: activation {activation!r}")
    return out


def causal_conv1d_fn_cpu(x, weight, bias=None, activation="silu", conv_states=None, has_initial_state=None,
                         cache_indices=None, query_start_loc=None, seq_lens_cpu=None, pad_slot_id=-1, **kwargs):
    """L7: ``x`` ``[dim, total tokens]``; ``conv_states`` ``[slots, dim, W - 1]`` updated in place."""
    width = weight.shape[1]
    out = _empty_like(x)
    bounds = _bounds(query_start_loc, query_start_loc.shape[0] - 1, 0)
    for i, (s, e) in enumerate(bounds):
        slot = int(cache_indices[i]) if cache_indices is not None else i
        if slot == pad_slot_id:
            continue
        initial = has_initial_state is not None and bool(has_initial_state[i])
        start = conv_states[slot].float() if initial else x.new_zeros((x.shape[0], width - 1)).float()
        window = _cat(start, x[:, s:e].float())
        out[:, s:e] = _conv(window, weight, bias, activation).to(out.dtype)
        conv_states[slot] = window[:, window.shape[1] - (width - 1):].to(conv_states.dtype)
    return out


def causal_conv1d_update_cpu(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                             conv_state_indices=None, intermediate_conv_window=None, intermediate_state_indices=None,
                             retrieve_next_token=None, retrieve_next_sibling=None, retrieve_parent_token=None,
                             pad_slot_id=-1, **kwargs):
    """L8: ``x`` ``[B, dim]`` or ``[B, dim, S]``; ``conv_state`` ``[slots, dim, W - 1]`` updated in place."""
    if cache_seqlens is not None or retrieve_next_token is not None or kwargs.get("num_accept_tokens") is not None:
        raise NotImplementedError("cpu_runtime L8: circular buffers, token trees and accept-count rolling")
    squeeze = x.dim() == 2
    xs = x.unsqueeze(-1) if squeeze else x
    width = weight.shape[1]
    out = _empty_like(xs)  # x's strides, as the Triton kernel's empty_like: the verify path views out.transpose(1, 2)
    for i in range(xs.shape[0]):
        slot = int(conv_state_indices[i]) if conv_state_indices is not None else i
        if slot == pad_slot_id:
            continue
        window = _cat(conv_state[slot].float(), xs[i].float())
        out[i] = _conv(window, weight, bias, activation).to(out.dtype)
        if intermediate_conv_window is not None and int(intermediate_state_indices[i]) >= 0:
            for t in range(xs.shape[2]):  # the window after token t: its last W - 1 inputs
                intermediate_conv_window[int(intermediate_state_indices[i]), t] = (
                    window[:, t + 1:t + width].to(intermediate_conv_window.dtype))
        conv_state[slot] = window[:, window.shape[1] - (width - 1):].to(conv_state.dtype)
    return out.squeeze(-1) if squeeze else out


def _empty_like(x):
    import torch

    return torch.empty_like(x)


def _cat(a, b):
    import torch

    return torch.cat([a, b], dim=-1)


_OPS = {
    "fused_sigmoid_mul_cpu": fused_sigmoid_mul,
    "fused_qk_gemma_rmsnorm_cpu": fused_qk_gemma_rmsnorm,
    "fused_qk_gemma_rmsnorm_with_gate_cpu": fused_qk_gemma_rmsnorm_with_gate,
    "fused_qkvzba_split_reshape_cat_contiguous_cpu": fused_qkvzba_split_reshape_cat_contiguous,
    "fused_gdn_gating_cpu": fused_gdn_gating,
    "fused_sigmoid_gating_delta_rule_update_cpu": fused_sigmoid_gating_delta_rule_update,
}


def _gated_rmsnorm(module, x, weight, bias, z, eps, group_size=None, norm_before_gate=True, activation="swish"):
    if activation not in ("swish", "silu"):
        raise NotImplementedError(f"cpu_runtime L10: gated RMSNorm activation {activation!r}")
    return module.rms_norm_ref(x, weight, bias, z=z, eps=eps, group_size=group_size,
                               norm_before_gate=norm_before_gate, upcast=True)


def _replace_once(cls, name: str, make) -> None:
    """``cls.name = make(original)``, once per class (a second call finds its own replacement and does nothing)."""
    original = getattr(cls, name)
    if getattr(original, "_cpu_runtime_linear_attn", False):
        return
    replacement = make(original)
    replacement._cpu_runtime_linear_attn = True
    setattr(cls, name, replacement)


def patch_gated_rmsnorm(module) -> None:
    """L10: ``RMSNorm.forward`` of fla/layernorm_gated.py computes SGLang's own ``rms_norm_ref`` on CPU tensors."""

    def make(original):
        def forward(self, x, z=None):
            if x.device.type != "cpu":
                return original(self, x, z)
            return _gated_rmsnorm(module, x, self.weight, self.bias, z, self.eps, self.group_size,
                                  self.norm_before_gate, self.activation)

        return forward

    _replace_once(module.RMSNorm, "forward", make)


def patch_fused_gated_rmsnorm(module) -> None:
    """L10: ``FusedRMSNormGated.forward`` of fla/fused_norm_gate.py, the same (no residual, no prenorm)."""
    import importlib

    ref = importlib.import_module("sglang.kernels.ops.attention.fla.layernorm_gated")

    def make(original):
        def forward(self, x, g, residual=None, prenorm=False, residual_in_fp32=False):
            if x.device.type != "cpu":
                return original(self, x, g, residual, prenorm, residual_in_fp32)
            if residual is not None or prenorm:
                raise NotImplementedError("cpu_runtime L10: FusedRMSNormGated with a residual")
            return _gated_rmsnorm(ref, x, self.weight, self.bias, g, self.eps, activation=self.activation)

        return forward

    _replace_once(module.FusedRMSNormGated, "forward", make)


def patch_qwen3_next_device(module) -> None:
    """L11: ``Qwen3GatedDeltaNet.__init__`` sees ``torch.get_device_module()`` name the CPU, as a CPU build does."""
    import functools

    import torch

    def make(original):
        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            real = torch.get_device_module
            torch.get_device_module = lambda device=None: torch.cpu if device is None else real(device)
            try:
                original(self, *args, **kwargs)
            finally:
                torch.get_device_module = real

        return __init__

    _replace_once(module.Qwen3GatedDeltaNet, "__init__", make)


def patch_verify_commit(module) -> None:
    """L12: the post-verify state scatters of kernels/ops/mamba/mamba_state_scatter_triton.py on CPU tensors run
    SGLang's own torch scatter (``HybridLinearAttnBackend._scatter_speculative_state_with_mask``)."""
    import functools
    import importlib

    if getattr(module, "_cpu_runtime_l12", False):
        return

    def torch_scatter(dst, src, dst_indices, steps, src_indices=None):
        backend = importlib.import_module("sglang.srt.layers.attention.hybrid_linear_attn_backend")
        backend.HybridLinearAttnBackend._scatter_speculative_state_with_mask(dst, src, dst_indices, steps, src_indices)

    def on_cpu(original):
        @functools.wraps(original)
        def scatter(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw=None):
            if dst.device.type != "cpu":
                return original(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw)
            return torch_scatter(dst, src, dst_indices_raw, step_indices_raw, src_indices_raw)

        return scatter

    multi = module.fused_conv_window_scatter_multi

    @functools.wraps(multi)
    def scatter_multi(pairs, dst_indices_raw, step_indices_raw, dst_indices2_raw=None, step_indices2_raw=None):
        if pairs[0][0].device.type != "cpu":
            return multi(pairs, dst_indices_raw, step_indices_raw, dst_indices2_raw, step_indices2_raw)
        for dst, src in pairs:
            torch_scatter(dst, src, dst_indices_raw, step_indices_raw)
            if step_indices2_raw is not None:
                torch_scatter(dst, src, dst_indices2_raw, step_indices2_raw)

    module.fused_mamba_state_scatter_with_mask = on_cpu(module.fused_mamba_state_scatter_with_mask)
    module.fused_conv_window_scatter_with_mask = on_cpu(module.fused_conv_window_scatter_with_mask)
    module.fused_conv_window_scatter_multi = scatter_multi
    module._cpu_runtime_l12 = True


def register(module=None) -> None:
    """Define L1-L6 in ``torch.ops.sgl_kernel`` (once per process; an op already defined there is left alone).

    Runs when the stub ``sgl_kernel`` is first imported (``sglang_cpu_patches.PATCHES``), before any SGLang model
    module binds ``torch.ops.sgl_kernel.*_cpu`` at its import."""
    if _LIB:
        return
    import torch

    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name, schema in SCHEMAS.items():
        if hasattr(torch.ops.sgl_kernel, name):
            continue
        lib.define(name + schema)
        lib.impl(name, _OPS[name], "CPU")
    _LIB.append(lib)


# module name -> what runs right after SGLang imports it (sglang_cpu_patches merges these into its PATCHES)
PATCHES = {
    "sgl_kernel": register,  # L1-L6 (the stub sgl_kernel: before any model module binds the ops)
    "sglang.kernels.ops.attention.fla.layernorm_gated": patch_gated_rmsnorm,  # L10 (Qwen3.5)
    "sglang.kernels.ops.attention.fla.fused_norm_gate": patch_fused_gated_rmsnorm,  # L10 (Qwen3-Next)
    "sglang.srt.models.qwen3_next": patch_qwen3_next_device,  # L11
    "sglang.kernels.ops.mamba.mamba_state_scatter_triton": patch_verify_commit,  # L12
}
