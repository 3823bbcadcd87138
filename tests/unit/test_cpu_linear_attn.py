"""The CPU runtime's torch stand-ins for SGLang's linear-attention CPU ops (cpu_runtime/sglang_cpu_linear_attn.py,
L1-L9) against transformers' own torch implementation of the same maths (models/qwen3_5/modeling_qwen3_5.py: the
gated delta rule, the causal conv, the gates, the q/k norms and the output gate), in SGLang's layouts: the state pool
``[slots, HV, V, K]`` (transformers keeps ``[B, HV, K, V]``), packed varlen batches, key heads shared by
``HV // H`` value heads. That the whole SGLang models then match HF is tests/engine/test_families_capture.py.
"""

import pytest
import sglang_cpu_linear_attn as la
import torch
import torch.nn.functional as F
from transformers.models.qwen3_5 import modeling_qwen3_5 as hf

TOL = dict(atol=2e-5, rtol=1e-4)  # fp32; the chunked and the recurrent form differ in rounding only
H, HV, K, V = 2, 4, 16, 8  # value head i uses key head i // 2 (transformers' repeat_interleave)


def _hf_delta_rule(q, k, v, g, beta, state_vk, *, chunked: bool):
    """transformers' gated delta rule for one sequence ``[T, ...]``, from a state in SGLang's ``[HV, V, K]`` layout;
    returns the output ``[T, HV, V]`` and the final state in SGLang's layout."""
    rep = HV // H
    fn = hf.torch_chunk_gated_delta_rule if chunked else hf.torch_recurrent_gated_delta_rule
    out, final = fn(q.repeat_interleave(rep, 1)[None], k.repeat_interleave(rep, 1)[None], v[None], g=g[None],
                    beta=beta[None], initial_state=state_vk.transpose(-1, -2)[None].clone(), output_final_state=True,
                    use_qk_l2norm_in_kernel=True)
    return out[0], final[0].transpose(-1, -2)


def _inputs(t, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(t, H, K, generator=gen), torch.randn(t, H, K, generator=gen)
    v = torch.randn(t, HV, V, generator=gen)
    a, b = torch.randn(t, HV, generator=gen), torch.randn(t, HV, generator=gen)
    return q, k, v, a, b


def _params(seed=7):
    gen = torch.Generator().manual_seed(seed)
    return torch.log(torch.empty(HV).uniform_(0.5, 4, generator=gen)), torch.rand(HV, generator=gen)  # A_log, dt_bias


def _hf_gates(A_log, a, b, dt_bias):
    return -A_log.float().exp() * F.softplus(a.float() + dt_bias), b.sigmoid()  # modeling_qwen3_5.py GatedDeltaNet


def test_gates_are_transformers_gates():
    A_log, dt_bias = _params()
    _, _, _, a, b = _inputs(5, 0)
    la.register()
    g, beta = torch.ops.sgl_kernel.fused_gdn_gating_cpu(A_log, a, b, dt_bias)
    g_ref, beta_ref = _hf_gates(A_log, a, b, dt_bias)
    assert g.shape == beta.shape == (1, 5, HV) and g.dtype == beta.dtype == torch.float32
    torch.testing.assert_close(g[0], g_ref, atol=0, rtol=1e-6)
    torch.testing.assert_close(beta[0], beta_ref, atol=0, rtol=1e-6)


def test_prefill_delta_rule_is_transformers_chunked_rule_per_sequence_and_writes_the_pool():
    """L9 on a packed batch of two sequences in pool slots 3 and 1, slot 3 with a prior state: outputs and final states
    equal transformers' chunked rule run on each sequence alone; the other slots are untouched."""
    A_log, dt_bias = _params()
    lens, slots = [5, 3], [3, 1]
    q, k, v, a, b = _inputs(sum(lens), 1)
    g, beta = _hf_gates(A_log, a, b, dt_bias)
    pool = torch.zeros(5, HV, V, K)
    pool[3] = torch.randn(HV, V, K, generator=torch.Generator().manual_seed(2)) * 0.1
    before = pool.clone()
    out, finals, h = la.chunk_gated_delta_rule_cpu(
        q=q[None], k=k[None], v=v[None], g=g[None], beta=beta[None], initial_state=pool,
        cu_seqlens=torch.tensor([0, 5, 8], dtype=torch.int32), head_first=False, use_qk_l2norm_in_kernel=True,
        initial_state_indices=torch.tensor(slots, dtype=torch.int32))
    assert out.shape == (1, 8, HV, V) and h is None
    for (s, e), slot, final in zip([(0, 5), (5, 8)], slots, finals):
        ref_out, ref_state = _hf_delta_rule(q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], before[slot], chunked=True)
        torch.testing.assert_close(out[0, s:e], ref_out, **TOL)
        torch.testing.assert_close(pool[slot], ref_state, **TOL)
        assert torch.equal(final, pool[slot])
    assert torch.equal(pool[[0, 2, 4]], before[[0, 2, 4]])
    assert not torch.allclose(pool[3], before[3])


def test_decode_and_verify_delta_rule_is_transformers_recurrent_rule():
    """L6 for decode (one token per sequence, state written back) and target verify (three draft tokens per
    sequence: the state after each step in the intermediate buffer, the pool untouched), against transformers'
    recurrent rule."""
    A_log, dt_bias = _params()
    pool = torch.randn(4, HV, V, K, generator=torch.Generator().manual_seed(3)) * 0.1
    before = pool.clone()
    la.register()
    op = torch.ops.sgl_kernel.fused_sigmoid_gating_delta_rule_update_cpu
    # decode: slots 2 and 0, one token each
    q, k, v, a, b = _inputs(2, 4)
    out = op(A_log=A_log, dt_bias=dt_bias, q=q[None], k=k[None], v=v[None], a=a, b=b, initial_state_source=pool,
             initial_state_indices=torch.tensor([2, 0]), cu_seqlens=torch.tensor([0, 1, 2]),
             use_qk_l2norm_in_kernel=True, softplus_beta=1.0, softplus_threshold=20.0)
    g, beta = _hf_gates(A_log, a, b, dt_bias)
    for i, slot in enumerate([2, 0]):
        ref_out, ref_state = _hf_delta_rule(q[i:i + 1], k[i:i + 1], v[i:i + 1], g[i:i + 1], beta[i:i + 1],
                                            before[slot], chunked=False)
        torch.testing.assert_close(out[0, i:i + 1], ref_out, **TOL)
        torch.testing.assert_close(pool[slot], ref_state, **TOL)
    # verify: slot 1, three draft tokens, intermediate row 5 of a [7, 3, HV, V, K] buffer
    pool_before, steps = pool.clone(), torch.zeros(7, 3, HV, V, K)
    q, k, v, a, b = _inputs(3, 5)
    out = op(A_log=A_log, dt_bias=dt_bias, q=q[None], k=k[None], v=v[None], a=a, b=b, initial_state_source=pool,
             initial_state_indices=torch.tensor([1]), cu_seqlens=torch.tensor([0, 3]), use_qk_l2norm_in_kernel=True,
             softplus_beta=1.0, softplus_threshold=20.0, is_kda=False, disable_state_update=True,
             intermediate_states_buffer=steps, intermediate_state_indices=torch.tensor([5]), cache_steps=3)
    g, beta = _hf_gates(A_log, a, b, dt_bias)
    ref_out, _ = _hf_delta_rule(q, k, v, g, beta, pool_before[1], chunked=False)
    torch.testing.assert_close(out[0], ref_out, **TOL)
    for t in range(3):
        _, state_t = _hf_delta_rule(q[:t + 1], k[:t + 1], v[:t + 1], g[:t + 1], beta[:t + 1], pool_before[1],
                                    chunked=False)
        torch.testing.assert_close(steps[5, t], state_t, **TOL)
    assert torch.equal(pool, pool_before)  # disable_state_update
    assert not steps[[0, 1, 2, 3, 4, 6]].any()
    with pytest.raises(NotImplementedError):  # a token tree (topk > 1) is refused, not run as a chain
        op(A_log=A_log, dt_bias=dt_bias, q=q[None], k=k[None], v=v[None], a=a, b=b, initial_state_source=pool,
           initial_state_indices=torch.tensor([1]), cu_seqlens=torch.tensor([0, 3]),
           retrieve_parent_token=torch.tensor([[-1, 0, 0]]))


def test_prefill_conv_is_transformers_causal_conv_and_keeps_the_last_inputs():
    """L7: a fresh sequence is transformers' zero-padded causal conv; a sequence with a prior window continues it
    (transformers' conv update over ``cat(window, x)``); each slot keeps its last W - 1 inputs."""
    dim, width = 6, 4
    gen = torch.Generator().manual_seed(6)
    weight, bias = torch.randn(dim, width, generator=gen), torch.randn(dim, generator=gen)
    x = torch.randn(dim, 7, generator=gen)
    states = torch.randn(3, dim, width - 1, generator=gen)
    prior = states[0].clone()
    out = la.causal_conv1d_fn_cpu(x, weight, bias, activation="silu", conv_states=states,
                                  has_initial_state=torch.tensor([False, True]), cache_indices=torch.tensor([2, 0]),
                                  query_start_loc=torch.tensor([0, 5, 7]), seq_lens_cpu=[5, 2])
    fresh = hf.causal_conv1d_fn(x[None, :, :5], weight, bias, activation="silu")[0]
    torch.testing.assert_close(out[:, :5], fresh, **TOL)
    window = prior[None].clone()
    cont = hf.causal_conv1d_update(x[None, :, 5:7], window, weight, bias, activation="silu")[0]
    torch.testing.assert_close(out[:, 5:7], cont, **TOL)
    assert torch.equal(states[2], x[:, 2:5])
    assert torch.equal(states[0], window[0])  # transformers' own update of the same window
    assert not torch.equal(states[0], prior)


def test_decode_and_verify_conv_update_is_transformers_conv_update():
    """L8: one token per sequence (decode) and three draft tokens (verify: the window after each token saved)."""
    dim, width = 6, 4
    gen = torch.Generator().manual_seed(8)
    weight, bias = torch.randn(dim, width, generator=gen), torch.randn(dim, generator=gen)
    states = torch.randn(4, dim, width - 1, generator=gen)
    before = states.clone()
    x = torch.randn(2, dim, generator=gen)
    out = la.causal_conv1d_update_cpu(x, states, weight, bias, "silu", conv_state_indices=torch.tensor([3, 1]))
    ref_states = before[[3, 1]].clone()
    ref = hf.causal_conv1d_update(x[:, :, None], ref_states, weight, bias, activation="silu")[:, :, 0]
    torch.testing.assert_close(out, ref, **TOL)
    assert torch.equal(states[[3, 1]], ref_states) and torch.equal(states[[0, 2]], before[[0, 2]])
    xs = torch.randn(1, 3, dim, generator=gen).transpose(1, 2)  # [B, dim, S] as SGLang's verify views it
    windows = torch.zeros(2, 3, dim, width - 1)
    start = states[2].clone()
    out = la.causal_conv1d_update_cpu(xs, states, weight, bias, "silu", conv_state_indices=torch.tensor([2]),
                                      intermediate_conv_window=windows, intermediate_state_indices=torch.tensor([1]))
    ref_state = start[None].clone()
    torch.testing.assert_close(out, hf.causal_conv1d_update(xs, ref_state, weight, bias, activation="silu"), **TOL)
    for t in range(3):
        step = start[None].clone()
        hf.causal_conv1d_update(xs[:, :, :t + 1], step, weight, bias, activation="silu")
        assert torch.equal(windows[1, t], step[0])
    assert torch.equal(states[2], ref_state[0]) and not windows[0].any()
    assert out.stride() == xs.stride()  # gdn_backend.py:1060 views out.transpose(1, 2) as [B * S, dim]
    assert torch.equal(out.transpose(1, 2).view(3, dim), out[0].T)


def test_qk_norms_output_gate_and_split_are_transformers_attention():
    """L1-L4 against transformers' Qwen3.5 attention and GatedDeltaNet modules."""
    la.register()
    torch.manual_seed(9)
    heads, kv_heads, d, t = 4, 2, 16, 3
    q_norm, k_norm = hf.Qwen3_5RMSNorm(d, eps=1e-6), hf.Qwen3_5RMSNorm(d, eps=1e-6)
    with torch.no_grad():
        q_norm.weight.normal_(), k_norm.weight.normal_()
    q_gate, k = torch.randn(t, heads * 2 * d), torch.randn(t, kv_heads * d)
    q_out, k_out, gate = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_with_gate_cpu(
        q_gate, k, q_norm.weight, k_norm.weight, 1e-6, d, heads)
    hf_q, hf_gate = torch.chunk(q_gate.view(t, heads, 2 * d), 2, dim=-1)  # Qwen3_5Attention.forward
    torch.testing.assert_close(q_out.view(t, heads, d), q_norm(hf_q), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(k_out.view(t, kv_heads, d), k_norm(k.view(t, kv_heads, d)), atol=1e-6, rtol=1e-6)
    assert torch.equal(gate.view(t, heads, d), hf_gate)
    q2, k2 = torch.ops.sgl_kernel.fused_qk_gemma_rmsnorm_cpu(hf_q.reshape(t, -1), k, q_norm.weight, k_norm.weight,
                                                              1e-6, d)
    assert torch.equal(q2, q_out.view(t, -1)) and torch.equal(k2, k_out.view(t, -1))
    attn, gate_flat = torch.randn(t, heads * d), gate.reshape(t, -1)
    expected = attn * torch.sigmoid(gate_flat)  # Qwen3_5Attention.forward
    torch.ops.sgl_kernel.fused_sigmoid_mul_cpu(attn, gate_flat)
    torch.testing.assert_close(attn, expected, atol=1e-6, rtol=1e-6)
    # L4: SGLang's merged projections [qkv | z] and [b | a] split back into transformers' four projections
    cfg = hf.Qwen3_5TextConfig(hidden_size=32, linear_num_key_heads=H, linear_num_value_heads=HV,
                               linear_key_head_dim=K, linear_value_head_dim=V, num_hidden_layers=1,
                               layer_types=["linear_attention"])
    gdn = hf.Qwen3_5GatedDeltaNet(cfg, 0)
    x = torch.randn(t, 32)
    with torch.no_grad():
        qkvz = torch.cat([gdn.in_proj_qkv(x), gdn.in_proj_z(x)], dim=-1)
        ba = torch.cat([gdn.in_proj_b(x), gdn.in_proj_a(x)], dim=-1)
        qkv, z, b, a = torch.ops.sgl_kernel.fused_qkvzba_split_reshape_cat_contiguous_cpu(qkvz, ba, H, HV, K, V)
        assert torch.equal(qkv, gdn.in_proj_qkv(x)) and torch.equal(z, gdn.in_proj_z(x).view(t, HV, V))
        assert torch.equal(b, gdn.in_proj_b(x)) and torch.equal(a, gdn.in_proj_a(x))
