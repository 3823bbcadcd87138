"""The draft's own rollouts offline, as SGLang's EAGLE-3 draft decode runs them (chains and top-k trees), from every
row of :func:`.model.eagle3_shift`'s alignment; docs/plan.md, "Definitions"."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .model import Eagle3Draft

QUERY_CHUNK = 512  # attention queries per block on long sequences (bounds the score matrix)


def fc_input(draft: Eagle3Draft, aux: torch.Tensor) -> torch.Tensor:
    return draft.fc_in(aux.to(draft.fc.weight.dtype))


def _attend(attn, x: torch.Tensor, step: int, cache: list) -> torch.Tensor:
    """Step ``step``'s attention for ``x`` ``[B, S, T, in]`` (S top-k slots) to step 0's keys up to the row and the
    slot's own earlier keys (kernels/ops/speculative/cache_locs.py); appends this step's keys to ``cache``."""
    c = attn.c
    b, s, t, _ = x.shape
    q, k, v = attn.qkv(x, (torch.arange(t, device=x.device) + step).expand(b * s, t))
    cache.append((k.view(b, s, t, *k.shape[2:]), v.view(b, s, t, *v.shape[2:])))
    rep = c.num_attention_heads // c.num_key_value_heads
    keys, values = zip(*([kk.expand(b, s, *kk.shape[2:]).reshape(b * s, *kk.shape[2:]) for kk in kv]
                         for kv in cache))
    q = q.transpose(1, 2)
    outs = []
    for t0 in range(0, t, QUERY_CHUNK):
        t1 = min(t, t0 + QUERY_CHUNK)
        kv = [torch.cat([part[0][:, :t1]] + [p[:, t0:t1] for p in part[1:]], dim=1)
              .repeat_interleave(rep, dim=2).transpose(1, 2) for part in (keys, values)]
        # step 0's keys up to the row (causal), then this slot's own key of each later step (diagonal)
        mask = torch.cat([torch.ones(t1 - t0, t1, dtype=torch.bool, device=x.device).tril(t0)]
                         + [torch.eye(t1 - t0, dtype=torch.bool, device=x.device)] * step, dim=1)
        outs.append(F.scaled_dot_product_attention(q[:, :, t0:t1], *kv, attn_mask=mask, scale=c.head_dim ** -0.5))
    return attn.o_proj(torch.cat(outs, dim=2).transpose(1, 2).reshape(b, s, t, -1))


def _step(draft: Eagle3Draft, tokens: torch.Tensor, h: torch.Tensor, step: int, caches: list[list]):
    """One draft forward over ``tokens`` ``[B, S, T]`` and ``h`` ``[B, S, T, H]``: ``(logits, pre-norm output)``."""
    x, residual = h, None
    embeds = draft.embed_tokens(tokens)
    for layer, cache in zip(draft.layers, caches):
        x, residual = layer(None, embeds, x, residual,
                            attend=lambda attn, y, cache=cache: _attend(attn, y, step, cache))
    normed, out = draft.norm(x, residual)
    return F.linear(normed, draft.embed_tokens.weight if draft.lm_head is None else draft.lm_head.weight), out


def unrolled_logits(draft: Eagle3Draft, ids: torch.Tensor, aux: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Teacher-forced chain (differentiable, for test-time training): each step's logits; step k reads ``ids[:,k:]``."""
    t = aux.shape[1]
    h = fc_input(draft, aux)[:, None]
    caches: list[list] = [[] for _ in draft.layers]
    out = []
    for k in range(steps):
        logits, h = _step(draft, ids[:, None, k:k + t], h, k, caches)
        out.append(logits[:, 0])
    return out


def _shifted(x: torch.Tensor, k: int, fill) -> torch.Tensor:
    """``x[:, k:]`` padded back to ``x``'s length with ``fill`` (row r of the result is row r + k)."""
    k = min(k, x.shape[1])
    return torch.cat([x[:, k:], x.new_full((x.shape[0], k), fill)], dim=1) if k else x


@torch.no_grad()
def accepted_drafts(draft: Eagle3Draft, ids: torch.Tensor, aux: torch.Tensor, tgt: torch.Tensor, mask: torch.Tensor,
                    settings: list) -> dict[Any, torch.Tensor]:
    """Per :class:`.expected.Setting`, the draft tokens a greedy verify accepts from each row (``-1`` where ``mask``
    is false); settings sharing a ``topk`` share one rollout of their largest ``steps`` (a tree's first steps do not
    depend on the rest)."""
    out: dict[Any, torch.Tensor] = {}
    for topk in sorted({s.topk for s in settings}):
        group = [s for s in settings if s.topk == topk]
        steps = max(s.steps for s in group)
        cands = tree_candidates(draft, ids, aux, tgt, mask, steps, topk)
        for s in group:  # accepted: the depth of the deepest right selected node (0 when none is right)
            _, _, depth, right = selected(cands, s)
            acc = (depth * right).max(-1).values
            out[s] = torch.where(mask, acc, torch.full_like(acc, -1))
    return out


def tree_candidates(draft, ids, aux, tgt, mask, steps: int, topk: int) -> list[tuple]:
    """Per step ``(scores, depth, right, tokens)`` ``[B, T, n]`` in speculative/eagle_utils.py
    ``organize_draft_results``'s order; ``right``: the node's whole path equals the target's."""
    b, t = ids.shape
    h = fc_input(draft, aux)[:, None]
    caches: list[list] = [[] for _ in draft.layers]
    logits, h = _step(draft, ids[:, None], h, 0, caches)
    cands = []
    slot_right = mask[:, None].clone()  # [B, 1, T]: the root's path (empty) is right where the row is a start
    scores = None
    for k in range(steps):
        lg = logits.float()
        if topk == 1:  # SGLang's topk-1 path: argmax, score 1
            p, idx = torch.ones_like(lg[..., :1]), lg.argmax(-1, keepdim=True)
        else:
            p, idx = torch.softmax(lg, dim=-1).topk(topk, dim=-1)  # [B, S, T, topk]
        tokens = draft.to_target_ids(idx)
        scored = _shifted(mask, k, False)[:, None, :, None]
        right = slot_right[..., None] & scored & (tokens == _shifted(tgt, k, -1)[:, None, :, None])
        if k == 0:  # speculative/spec_utils.py select_top_k_tokens step 0: topk_p (b, 1, topk)
            cand_scores = p[:, 0]  # [B, T, topk]
            keep_scores, keep = cand_scores, torch.arange(topk).expand(b, t, topk)
            flat_tokens, flat_right = tokens[:, 0], right[:, 0]
        else:  # later steps: scores (b, topk, 1) x topk_p (b, topk, topk), flattened slot-major
            expand = scores.permute(0, 2, 1)[..., None] * p.permute(0, 2, 1, 3)  # [B, T, S, topk]
            cand_scores = expand.flatten(2)
            flat_tokens = tokens.permute(0, 2, 1, 3).flatten(2)
            flat_right = right.permute(0, 2, 1, 3).flatten(2)
            keep_scores, keep = (cand_scores.max(-1, keepdim=True) if topk == 1 else cand_scores.topk(topk, dim=-1))
        cands.append((cand_scores, k, flat_right, flat_tokens))
        if k == steps - 1:
            break
        parent = keep // topk if k else torch.zeros_like(keep)  # slot of the previous step each kept node came from
        next_tokens = torch.gather(flat_tokens, 2, keep).permute(0, 2, 1)  # [B, topk, T]
        slot_right = torch.gather(flat_right, 2, keep).permute(0, 2, 1)
        h = torch.gather(h.expand(b, p.shape[1], *h.shape[2:]), 1,
                         parent.permute(0, 2, 1)[..., None].expand(-1, -1, -1, h.shape[-1]))
        scores = keep_scores.permute(0, 2, 1)  # [B, topk, T]
        logits, h = _step(draft, next_tokens, h, k + 1, caches)
    return cands


def selected(cands: list[tuple], s: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(candidate index, token, depth, right)`` of the ``draft_tokens - 1`` best-scored candidates, in order."""
    part = cands[:s.steps]
    scores, right, tokens = (torch.cat([c[i] for c in part], dim=-1) for i in (0, 2, 3))
    depth = torch.cat([torch.full_like(c[2], c[1] + 1, dtype=torch.long) for c in part], dim=-1)
    n = min(s.draft_tokens - 1, scores.shape[-1])
    if s.topk == 1:  # the chain: every step is drafted
        sel = torch.arange(n).expand(*scores.shape[:2], n)
    else:
        sel = torch.sort(torch.topk(scores, n, dim=-1).indices, dim=-1).values
    return sel, *(torch.gather(x, 2, sel) for x in (tokens, depth, right))


def per_position(accepted: torch.Tensor, steps: int) -> list[float]:
    """``[k]``: the fraction of starts that accept at least ``k + 1`` draft tokens."""
    a = accepted[accepted >= 0]
    return [float((a >= k + 1).float().mean()) if a.numel() else 0.0 for k in range(steps)]
