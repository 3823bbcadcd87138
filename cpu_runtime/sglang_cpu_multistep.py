"""CPU runtime (never shipped): multi-step and tree EAGLE drafting for SGLang's ``torch_native`` attention backend.

Two pieces, each installed by one patch in ``sglang_cpu_patches`` (B7, B8; see its docstring):

- :class:`TorchNativeMultiStepDraftBackend` (B7): the per-step container ``DraftBackendFactory.create_decode_backend``
  returns for ``speculative_num_steps >= 2``, like SGLang's own ``TritonMultiStepDraftBackend`` and
  ``IntelAMXMultiStepDraftBackend``: one backend per draft decode step (``num_steps - 1`` of them), planned once
  per draft by ``init_forward_metadata`` (the worker then marks the batch planned and runs step ``i`` under
  ``attn_backends[i]``).
- :func:`tree_verify_extend` (B8): TARGET_VERIFY attention for a token tree (``speculative_eagle_topk > 1``),
  masked by the tree mask SGLang builds into ``spec_info.custom_mask``.

What a draft token sees (the layout SGLang's Triton kernel ``generate_draft_decode_kv_indices`` in
``sglang/kernels/ops/speculative/cache_locs.py`` reads, page size 1): the draft step ``j`` token of branch ``t``
of request ``b`` has its KV in ``req_to_token[b, seq_len + t * num_steps + j]``; at step ``i`` (0-based) row
``b * topk + t`` attends to the request's ``seq_len`` committed tokens followed by its branch's slots for steps
``0..i``. We build that as one expanded ``req_to_token`` table (one row per branch, as intel_amx's
``build_draft_decode_metadata_cpu`` does) and run SGLang's own ``TorchNativeAttnBackend.forward_decode`` on it,
so the KV write and the attention maths are SGLang's.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from torch.nn.functional import scaled_dot_product_attention


def draft_decode_table(req_to_token, req_pool_indices, seq_lens, topk: int, num_steps: int) -> torch.Tensor:
    """The expanded ``req_to_token`` for a multi-step draft: row ``b * topk + t`` holds request ``b``'s committed
    slots ``[0, seq_len)`` and then branch ``t``'s ``num_steps`` draft slots ``seq_len + t * num_steps + j``."""
    seq_lens = seq_lens.to(torch.int64)
    width = int(seq_lens.max()) + num_steps if seq_lens.numel() else num_steps
    rows = req_pool_indices.to(torch.int64).repeat_interleave(topk)  # [bs * topk]
    lens = seq_lens.repeat_interleave(topk).unsqueeze(1)  # [bs * topk, 1]
    branch = torch.arange(topk, device=seq_lens.device).repeat(seq_lens.numel()).unsqueeze(1)
    col = torch.arange(width, device=seq_lens.device).unsqueeze(0)
    src = torch.where(col < lens, col, lens + branch * num_steps + (col - lens))
    src = src.clamp(max=req_to_token.shape[1] - 1)  # columns past a row's last step are never read
    return req_to_token[rows.unsqueeze(1), src].contiguous()


class TorchNativeDraftStepBackend(TorchNativeAttnBackend):
    """One draft decode step: SGLang's TorchNativeAttnBackend reading the expanded table its container planned."""

    draft_decode_metadata = None  # (table, seq_lens per branch row, row indices), set by the container

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        if self.draft_decode_metadata is None:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
        table, seq_lens, rows = self.draft_decode_metadata
        fb = copy.copy(forward_batch)
        fb.seq_lens, fb.req_pool_indices = seq_lens, rows
        pool = self.req_to_token_pool
        self.req_to_token_pool = SimpleNamespace(req_to_token=table)
        try:
            return super().forward_decode(q, k, v, layer, fb, save_kv_cache, **kwargs)
        finally:
            self.req_to_token_pool = pool


class TorchNativeMultiStepDraftBackend:
    """``speculative_num_steps - 1`` TorchNativeDraftStepBackends, planned together once per draft."""

    needs_cpu_seq_lens: bool = False

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.device = model_runner.device
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.attn_backends = [TorchNativeDraftStepBackend(model_runner) for _ in range(speculative_num_steps - 1)]

    def init_forward_metadata(self, forward_batch):
        seq_lens = forward_batch.seq_lens
        table = draft_decode_table(self.req_to_token_pool.req_to_token, forward_batch.req_pool_indices, seq_lens,
                                   self.topk, self.speculative_num_steps)
        rows = torch.arange(table.shape[0], dtype=torch.int64, device=table.device)
        branch_lens = seq_lens.to(torch.int64).repeat_interleave(self.topk)
        for step, backend in enumerate(self.attn_backends):
            backend.init_forward_metadata(forward_batch)
            # Step `step` sees the committed prefix plus its branch's tokens of steps 0..step.
            backend.draft_decode_metadata = (table, branch_lens + step + 1, rows)


def tree_masks(spec_info, seq_lens) -> list[torch.Tensor]:
    """Per request, the ``[n, n]`` bool tree block of ``spec_info.custom_mask`` (True: the query draft token
    attends to that draft token, its ancestors and itself). Reads both of SGLang's layouts:
    QLEN_ONLY (``bs * n * n``, the CPU default, ``eagle_utils.default_tree_mask_mode``) and FULL_MASK
    (per request ``n`` rows of ``seq_len + n``)."""
    n = spec_info.draft_token_num
    mask = spec_info.custom_mask
    bs = seq_lens.shape[0]
    if mask.numel() == bs * n * n:
        return list(mask.view(bs, n, n).bool())
    out, offset = [], 0
    for seq_len in seq_lens.tolist():
        block = mask[offset: offset + n * (seq_len + n)].view(n, seq_len + n).bool()
        out.append(block[:, seq_len:])
        offset += n * (seq_len + n)
    return out


def tree_verify_extend(backend, q, k, v, layer, forward_batch, save_kv_cache, write_kv):
    """TARGET_VERIFY attention over a draft tree: request ``b``'s ``n`` draft tokens (query rows
    ``b * n .. b * n + n``) attend to its ``seq_len`` committed tokens and, among the draft tokens, to the
    ones its tree mask marks. ``write_kv(cache_loc)`` stores k/v the way the backend's own forward_extend does."""
    spec_info = forward_batch.spec_info
    n = spec_info.draft_token_num
    if save_kv_cache and k is not None and v is not None:
        write_kv(forward_batch.out_cache_loc)
    hq, hk = layer.tp_q_head_num, layer.tp_k_head_num
    q_ = q.view(-1, hq, layer.qk_head_dim)
    o = q.new_empty((q_.shape[0], hq, layer.v_head_dim))
    k_cache = backend.token_to_kv_pool.get_key_buffer(layer.layer_id)
    v_cache = backend.token_to_kv_pool.get_value_buffer(layer.layer_id)
    req_to_token = backend.req_to_token_pool.req_to_token
    seq_lens = forward_batch.seq_lens
    for b, (tree, seq_len) in enumerate(zip(tree_masks(spec_info, seq_lens), seq_lens.tolist())):
        toks = req_to_token[forward_batch.req_pool_indices[b], : seq_len + n]
        key = k_cache[toks].movedim(0, 1)  # [hk, S, d]
        value = v_cache[toks].movedim(0, 1)
        query = q_[b * n: (b + 1) * n].movedim(0, 1)  # [hq, n, d]
        if not (query.dtype == key.dtype == value.dtype):
            key, value = key.to(query.dtype), value.to(query.dtype)
        attn_mask = torch.ones((n, seq_len + n), dtype=torch.bool, device=q.device)
        attn_mask[:, seq_len:] = tree
        out = scaled_dot_product_attention(query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0),
                                           attn_mask=attn_mask, scale=layer.scaling, enable_gqa=hq != hk)
        o[b * n: (b + 1) * n] = out.squeeze(0).movedim(0, 1)
    # The shape TorchNativeAttnBackend.forward_extend returns: q's when the head dims agree, else 2-D.
    return o.view(q.shape) if layer.qk_head_dim == layer.v_head_dim else o.view(-1, hq * layer.v_head_dim)
