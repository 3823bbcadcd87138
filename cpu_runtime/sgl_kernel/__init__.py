"""Test-only stand-in for the ``sgl_kernel`` package (SGLang's compiled kernels).

The installed sgl_kernel wheel is CUDA-only: ``import sgl_kernel`` dies on ``libcuda.so.1``. With
``SGLANG_USE_CPU_ENGINE=1`` SGLang imports a handful of ``*_cpu`` ops from it at module import time
(e.g. ``kernels/ops/kvcache/cache_move.py``, ``srt/mem_cache/allocation.py``). This stub makes those
imports succeed. Any op not written out below raises ``NotImplementedError`` *when called*, so nothing
silently runs a fake kernel. The few written out are pure bookkeeping (index copies) that EAGLE-3's
speculative loop calls on CPU; the tree build/verify ops delegate to SGLang's own Triton kernels,
which run on CPU only under ``TRITON_INTERPRET=1``.

This directory must come before site-packages on ``sys.path`` (``sglang_cpu_patches.cpu_env()`` arranges that).
"""

import ctypes

__version__ = "0.4.10"  # the sglang-kernel version SGLang 0.5.23 pins


def _spec_tree(name):
    """SGLang's own Triton tree kernel ``name``: kernels/ops/speculative/spec_tree.py from 0.5.23,
    srt/speculative/eagle_utils.py up to 0.5.22."""
    import importlib

    for module in ("sglang.kernels.ops.speculative.spec_tree", "sglang.srt.speculative.eagle_utils"):
        try:
            fn = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if fn is not None:
            return fn
    raise NotImplementedError(f"stub sgl_kernel: SGLang's Triton {name} not found")


def __getattr__(name):
    # Import-only stub: `from sgl_kernel import X` succeeds for any X, calling X fails loudly.
    if name.startswith("__"):
        raise AttributeError(name)

    def _not_in_stub(*args, **kwargs):
        raise NotImplementedError(f"stub sgl_kernel.{name} called (cpu_runtime/sgl_kernel)")

    _not_in_stub.__name__ = name
    return _not_in_stub


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """Stands in for the CPU op behind sglang.kernels.ops.kvcache.cache_move.copy_all_layer_kv_cache_func.

    For each KV buffer (raw base pointer + row stride in bytes) copy row ``src_loc[i]`` to ``tgt_loc[i]``,
    as the Triton kernel ``copy_all_layer_kv_cache_tiled`` in the same file does. Raw pointers are what
    SGLang passes, hence ctypes.
    """
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        for tgt, src in zip(tgt_loc.tolist(), src_loc.tolist()):
            ctypes.memmove(base + tgt * stride, base + src * stride, stride)


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """Stands in for the CPU op in sglang.srt.mem_cache.allocation.assign_req_to_token_pool_func.

    Mirrors the Triton kernel ``assign_req_to_token_pool``: row r gets out_cache_loc slices in [start, end).
    """
    offset = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        req_to_token[row, start:end] = out_cache_loc[offset : offset + end - start].to(req_to_token.dtype)
        offset += end - start


def assign_extend_cache_locs_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """Stands in for the CPU op in sglang.kernels.ops.speculative.cache_locs (assign_extend_cache_locs).

    The inverse gather of assign_req_to_token_pool: out_cache_loc gets row r's slots [start, end).
    """
    offset = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        out_cache_loc[offset : offset + end - start] = req_to_token[row, start:end].to(out_cache_loc.dtype)
        offset += end - start


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices, req_to_token, seq_lens, out_cache_loc, pool_len, topk,
                                           num_cols):
    """Stands in for the CPU op in sglang.kernels.ops.speculative.cache_locs.assign_draft_cache_locs_contiguous_func.

    Mirrors the Triton kernel ``assign_draft_cache_locs_contiguous`` without positions: request i copies
    ``topk * num_cols`` slots of its row starting at seq_lens[i].
    """
    n = topk * num_cols
    for i, (row, start) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[i * n : (i + 1) * n] = req_to_token[row, start : start + n].to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(accept_tokens, accept_lens, bonus_tokens, accept_stride):
    """Stands in for the CPU op in sglang.kernels.ops.speculative.eagle.fill_bonus_tokens_func.

    Mirrors the Triton kernel ``fill_bonus_tokens``: the last accepted token of each request.
    """
    flat = accept_tokens.reshape(-1)
    for i, length in enumerate(accept_lens.tolist()):
        bonus_tokens[i] = flat[accept_stride * i + length - 1]


def fill_accept_out_cache_loc_cpu(accept_index, out_cache_loc, accept_out_cache_loc):
    """Stands in for the CPU op in sglang.kernels.ops.speculative.eagle.fill_accept_out_cache_loc_func.

    Mirrors the Triton kernel ``fill_accept_out_cache_loc``: compact the cache slots of accepted (!= -1) indices.
    """
    index = accept_index.reshape(-1)
    index = index[index != -1].long()
    accept_out_cache_loc[: index.numel()] = out_cache_loc[index].to(accept_out_cache_loc.dtype)


def build_tree_kernel_efficient_cpu(*args):
    """Stands in for the CPU op in sglang.kernels.ops.speculative.spec_tree.build_tree_kernel_efficient_func
    (0.5.23; srt/speculative/eagle_utils.build_tree_kernel_efficient before).

    Delegates to SGLang's own Triton version (the one its XPU branch uses); needs TRITON_INTERPRET=1 on CPU.
    """
    return _spec_tree("sgl_build_tree_kernel_triton")(*args)


def verify_tree_greedy_cpu(predicts, accept_index, accept_token_num, candidates, retrive_index,
                           retrive_next_token, retrive_next_sibling, target_predict):
    """Stands in for the CPU op in sglang.kernels.ops.speculative.spec_tree.verify_tree_greedy_func
    (0.5.23; srt/speculative/eagle_utils.verify_tree_greedy_func before).

    SGLang calls it with the CUDA schema's ``retrive_*`` keyword names. Delegates to SGLang's own Triton
    version (its XPU branch); needs TRITON_INTERPRET=1 on CPU.
    """
    return _spec_tree("verify_tree_greedy_triton")(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                     retrive_next_token, retrive_next_sibling, target_predict)
