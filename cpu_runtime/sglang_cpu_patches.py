"""The CPU runtime's monkeypatches: they let SGLang's own model classes and EAGLE-3 code run on a CPU without AMX.

Never shipped in the package: tests, benchmarks and ``make demo`` put this folder first on PYTHONPATH.

Each patch touches exactly one SGLang module and stands in for one function there:

B1  sglang.srt.models.deepseek_common.attention_backend_handler
    ``AttentionBackendRegistry.get_handler("torch_native")``: SGLang registers no DeepSeek handler for
    torch_native and falls back to the triton handler, which picks MHA for a fresh prefill. MHA reads the
    MLA (latent) KV cache with MHA shapes and torch_native's SDPA fails. We register a handler that always
    takes the absorbed-MLA path, the one the triton handler uses for every other batch.
B2  sglang.srt.speculative.draft_utils
    ``DraftBackendFactory.create_draft_extend_backend``: its backend map has no torch_native entry
    ("EAGLE is not supported in attention backend torch_native"). We add one: SGLang's own
    TorchNativeAttnBackend on the draft runner. Only the draft-extend call gets it; multi-step draft
    decode (speculative_num_steps >= 2) is B7's.
B3  sglang.srt.layers.attention.torch_native_backend
    ``TorchNativeAttnBackend.forward_extend`` in TARGET_VERIFY mode: the verify batch carries no
    extend_prefix_lens/extend_seq_lens. For topk == 1 the draft "tree" is a chain, so verify is a plain
    causal extend of ``num_draft_tokens`` tokens after ``seq_lens`` committed ones; we fill those lengths
    in. topk > 1 needs a tree mask: B8 takes those batches before they reach B3 (B3 alone raises).
B4  sglang.srt.distributed.parallel_state
    ``init_model_parallel_group`` defaults ``use_pynccl`` to True, and ``GroupCoordinator.__init__`` then builds
    a PyNcclCommunicator when ``world_size > 1``, which fails on CPU ("Expected a cuda device, but got: cpu").
    We default ``use_pynccl=False`` (gloo only), so ``--tp-size 2`` runs on CPU (with
    ``SGLANG_CPU_OMP_THREADS_BIND``); at TP 1 no communicator is built either way.

B5  sglang.srt.layers.attention.torch_native_backend (GPT-OSS)
    ``TorchNativeAttnBackend.forward_extend``/``forward_decode`` get ``sinks=`` (per-head attention-sink logits)
    from ``GptOssAttention`` (models/gpt_oss.py:497-501) and fail with ``TypeError: unexpected keyword argument
    'sinks'``. With sinks we compute the attention per request in fp32: scores, the causal mask plus SGLang's
    sliding-window mask ``k >= q - window``, GQA by repeat, softmax over ``[scores, sink]`` with the sink column
    dropped, then ``@ V``; a hybrid SWA KV pool (GPT-OSS gets one) is read through
    ``translate_loc_from_full_to_swa`` for sliding layers. Calls without sinks go to the original methods; B3
    wraps B5's ``forward_extend``. GPT-OSS also needs two server arguments on CPU (no code):
    ``attention_backend="intel_amx"`` (passes ``arg_groups/model_hook.py``'s backend assert, then falls back to
    torch_native on a CPU without AMX; on an AMX CPU it would pick the real AMX backend) and
    ``moe_runner_backend="triton"`` ("auto" picks triton_kernel, whose transposed expert layout breaks loading).
B6  sglang.srt.models.minimax_m2
    ``MiniMaxM2QKRMSNorm._forward_naive`` calls the Triton kernels ``rms_sumsq_serial``/``rms_apply_serial``
    (minimax_m2.py:203-285), which assert CUDA inputs. We replace the two module functions with torch ops of
    the same maths: per-row sums of squares of q and k in a padded fp32 vector, then
    ``x * rsqrt(sum_sq / D / tp_world + eps) * w`` in fp32, cast back.

B7  sglang.srt.speculative.draft_utils
    ``DraftBackendFactory.create_decode_backend`` (speculative_num_steps >= 2): its map has no torch_native entry
    ("EAGLE is not supported in decode attention backend torch_native"). We add one, as B2 does for draft
    extend: ``sglang_cpu_multistep.TorchNativeMultiStepDraftBackend``, one TorchNativeAttnBackend per draft
    step (steps - 1 of them) that reads an expanded req_to_token, one row per (request, branch): the
    request's committed slots, then its branch's draft slots ``seq_len + branch * num_steps + step`` (the
    layout SGLang's Triton ``generate_draft_decode_kv_indices`` reads; intel_amx builds the same table).
    The step's seq_len is ``seq_len + step + 1``; the KV write and the SDPA are SGLang's own forward_decode.
B8  sglang.srt.layers.attention.torch_native_backend
    ``TorchNativeAttnBackend.forward_extend`` in TARGET_VERIFY with topk > 1 (a token tree): each request's
    ``num_draft_tokens`` queries attend to its committed prefix and, among the draft tokens, to those the
    tree mask in ``spec_info.custom_mask`` marks (ancestors and self). On CPU SGLang builds that mask as
    QLEN_ONLY, ``bs * n * n`` (speculative/eagle_utils.py:132 ``default_tree_mask_mode``); the FULL_MASK
    layout is read too. KV is written as forward_extend writes it; SDPA with the boolean mask, per request.
    topk == 1 batches and every other mode go to B3/B5 below it. No attention sinks or sliding window here.
B9  sglang.srt.layers.attention.torch_native_backend (DP attention)
    ``ForwardBatch._pad_inputs_to_size`` (model_executor/forward_batch_info.py:2014 in 0.5.23), which DP attention
    runs to pad each rank's batch to the gathered size, asks the attention backend on CPU for
    ``get_cpu_graph_seq_len_fill_value()``; TorchNativeAttnBackend has none (AttributeError). We give it the
    value SGLang's CPU backend returns (layers/attention/intel_amx_backend.py:198: 1, a padded request's length).

    Why torch_native (B7, B8) and not SGLang's ``triton`` backend under TRITON_INTERPRET=1, measured on this
    2-core CPU, 2 prompts x 16 greedy tokens, fp32: with the CPU runtime's TRITON_INTERPRET=1 the triton
    backend gets past "0 active drivers", but (1) on fixtures/tiny (DeepSeek MLA, kv_lora_rank 32 + rope 16)
    the first decode fails: ``InterpreterError: ValueError('Cannot make_shape_compatible: incompatible
    dimensions at index 1: 32 and 64')`` at sglang/kernels/ops/attention/decode_attention.py:762 (``acc +=
    tl.dot(p.to(v.dtype), v)``; with MLA v is k transposed, and lines 823-833 pad Lk=48 to 64 but Lv=32 to
    32, special-casing only Lk 576 and 288); (2) on fixtures/tiny-llama it runs but a generate takes 31-36 s
    against 0.6-3 s with torch_native (engine startup 23-31 s against 23-46 s, the spread being the shared
    machine's load), so time to first output is ~55 s against ~25-50 s; and its tree verify (steps 3, topk 2, 6
    draft tokens) is not greedy-equal to no speculation (prompt 0 diverges at token 3): on CPU SGLang builds the
    QLEN_ONLY mask (``bs * n * n``), the triton backend reads it as FULL_MASK (``n * (seq_len + n)`` per
    request, triton_backend.py ``mask_indptr``) and eagle_info.py ``generate_attn_arg_prefill`` pads the short
    mask with True, so tree tokens see their siblings. torch_native with B7/B8 is greedy-equal on both fixtures
    for (steps, topk, draft tokens) = (1,1,2) (3,1,4) (5,1,6) (3,2,6) (4,4,16) (2,4,8), generates in 1-13 s
    and keeps time to first output at engine startup (25-45 s) plus about 1-5 s
    (tests/engine/test_cpu_multistep.py).

B10, B11 (Llama 4) live in ``sglang_cpu_llama4.py``: ``moe_forward_native`` applies a MoE's router weight to its input
    as SGLang's AMX route does (B10), and the rotary embeddings ``Llama4Attention`` builds write in place as the CUDA
    kernel does (B11).
B12 sglang.srt.layers.moe.fused_moe_native (MiniMax-M3, LongCat-Flash)
    ``moe_forward_native``, the unquantized MoE on a CPU without AMX, applies GPT-OSS's interleaved SwiGLU-OAI to
    MiniMax-M3's non-interleaved gate/up rows, and drops the outputs of a token routed twice to one expert (LongCat's
    zero experts are all mapped to expert 0). ``sglang_cpu_moe.patch_moe_forward_native`` takes exactly those calls
    and runs every (token, slot) pair with SGLang's own activation functions; every other call is SGLang's own. B10
    wraps it (a router weight applied to the input reaches B12 as a plain call).
B13 (no code: ``CPU_ENV``) ``SGLANG_OPT_USE_BF16_ROUTER_GEMM=0``: MiniMax-M3's router otherwise computes its logits
    with ``torch.mm(..., out_dtype=torch.float32)`` on a bf16 gate (minimax_m3.py:472-477, 717-719), an op CPU torch
    does not have (``aten::mm.dtype``); with it off the gate is an fp32 ``ReplicatedLinear`` over fp32 input
    (minimax_m3.py:720), HF's router.
B14 sglang.srt.managers.tokenizer_manager (Kimi-K2.5; in cpu_runtime/sglang_cpu_kimi.py)
    ``TokenizerManager.init_tokenizer_and_processor`` (tokenizer_manager.py:608) builds a multimodal architecture's
    processor even under ``skip_tokenizer_init`` (612-626), and ``--language-model-only``, the flag that skips it, is
    refused for ``KimiK25ForConditionalGeneration`` (arg_groups/model_hook.py:1102-1109: not in
    ``ServerArgs.LANGUAGE_MODEL_ONLY_ARCHITECTURES``, server_args.py:335). SGLang's Kimi-K2.5 processor reads
    ``_processor.media_processor.media_proc_cfg`` (multimodal/processors/kimi_k25.py:546), which only the released
    checkpoint's own remote-code processor has (its preprocessor_config.json names Moonshot's classes in
    ``auto_map``); transformers 5.19's ``Kimi_K25Processor`` has no ``media_processor``, and this project does not
    copy Moonshot's code into a fixture. For a ``KimiK25ForConditionalGeneration`` checkpoint with no
    ``preprocessor_config.json``, served with ``skip_tokenizer_init`` (token ids, no images), we let that one call take
    the branch SGLang takes for text models (637: no processor, no tokenizer) by reading ``model_config.is_multimodal``
    as False during it. Only the tokenizer manager's front end changes: the scheduler, in its own process, builds and
    loads the whole ``KimiK25ForConditionalGeneration``, vision tower included, and runs text through its
    ``general_mm_embed_routine``. Images cannot be sent to such a server.
B15 sglang.srt.models.kimi_k25_eagle3 (the Kimi MLA draft; in cpu_runtime/sglang_cpu_kimi.py)
    ``Eagle3DeepseekV2ForCausalLM.set_embed`` and ``set_embed_and_head`` end with ``torch.cuda.empty_cache()`` and
    ``torch.cuda.synchronize()`` (kimi_k25_eagle3.py:404-423), unconditionally; the EAGLE worker calls one of them at
    startup to share the target's embedding (speculative/eagle_worker_v2.py:360-378), and ``synchronize`` raises
    without a CUDA device ("Found no NVIDIA driver"). We run the two methods with ``torch.cuda.synchronize`` a no-op
    while no CUDA device is available (restored after the call); what they do to the draft is SGLang's own code. The
    plugin's ``draft.mla.set_embed`` seam wraps this method (its signature, read through ``__wrapped__``, is SGLang's).
L1-L12 (``sglang_cpu_linear_attn``, merged into :data:`PATCHES`): torch stand-ins for the sgl-kernel CPU ops of the
hybrid linear-attention models (Qwen3.5, Qwen3-Next) and the patches that route their gated norms to SGLang's own torch
reference; that module's doc names each op's call site, its maths and its check.

``apply()`` imports the patched modules and patches them now. ``install_import_hook()`` (called by
``sitecustomize.py`` in this folder at interpreter start-up) patches each module right after it is first
imported instead, through the same after-import helper the plugin uses
(``sglang_eagle3_capture.core.after_import``), so processes that never import them pay nothing. Both
are idempotent. At import time this module imports only the standard library, that helper,
sglang_cpu_llama4 (B10, B11) and sglang_cpu_kimi (B14, B15), whose own imports are the standard library's;
B12's sglang_cpu_moe is imported when it applies.
"""

import copy
import os
import sys
from pathlib import Path

import sglang_cpu_kimi  # B14, B15
import sglang_cpu_linear_attn  # L1-L12
import sglang_cpu_llama4  # B10, B11

from sglang_eagle3_capture.core.after_import import when_imported

SHIM_DIR = Path(__file__).resolve().parent

# The environment SGLang needs to take its CPU path here. TORCHDYNAMO_DISABLE avoids a ~25 s inductor
# compile of biased_grouped_topk per process (and needs no gcc); the tests run fp32 where it is exact.
CPU_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",  # sglang.srt.utils.is_cpu() -> True
    "TRITON_INTERPRET": "1",  # SGLang's Triton tree kernels run on CPU only interpreted
    "TORCHDYNAMO_DISABLE": "1",
    "SGLANG_OPT_USE_BF16_ROUTER_GEMM": "0",  # B13: MiniMax-M3's bf16 router GEMM is CUDA-only
}

_PATCHED = "_sglang_cpu_shim_patched"


def cpu_env(base=None):
    """Return a copy of ``base`` (default os.environ) with CPU_ENV set and SHIM_DIR first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    env.update(CPU_ENV)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SHIM_DIR]
    env["PYTHONPATH"] = os.pathsep.join([str(SHIM_DIR), *parts])
    return env


def _once(module, patch):
    if getattr(module, _PATCHED, False):
        return
    patch(module)
    setattr(module, _PATCHED, True)


def patch_mla_dispatch(handler_module):
    """B1: DeepSeek attention with torch_native always uses absorbed MLA (AttnForwardMethod.MLA)."""

    def _patch(m):
        from sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods import AttnForwardMethod

        m.AttentionBackendRegistry.register("torch_native", lambda attn, forward_batch: AttnForwardMethod.MLA)

    _once(handler_module, _patch)


def patch_draft_extend_backend(draft_utils_module):
    """B2: give DraftBackendFactory's draft-extend backend map a torch_native entry.

    Release-neutral: only the map built inside ``create_draft_extend_backend`` gets the entry (the
    multi-step decode map keeps SGLang's error), and the entry returns what that release's
    ``_create_backend`` expects: ``(stamp, backend)`` where ``_create_backend`` has a
    ``stamps_children`` parameter (0.5.18+), the bare backend before (0.5.17).
    """

    def _patch(m):
        import inspect

        factory = m.DraftBackendFactory
        original_create = factory._create_backend
        original_extend = factory.create_draft_extend_backend
        returns_pair = "stamps_children" in inspect.signature(original_create).parameters

        def _torch_native(self):
            from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

            backend = TorchNativeAttnBackend(self.draft_model_runner)
            if returns_pair:
                return "torch_native", backend
            backend.prefill_attention_backend_str = backend.decode_attention_backend_str = "torch_native"
            return backend

        def create_draft_extend_backend(self, *args, **kwargs):
            self._cpu_shim_in_draft_extend = True
            try:
                return original_extend(self, *args, **kwargs)
            finally:
                self._cpu_shim_in_draft_extend = False

        def _create_backend(self, backend_name, backend_map, error_template, *args, **kwargs):
            if getattr(self, "_cpu_shim_in_draft_extend", False) and "torch_native" not in backend_map:
                backend_map = {**backend_map, "torch_native": lambda: _torch_native(self)}
            return original_create(self, backend_name, backend_map, error_template, *args, **kwargs)

        factory._create_backend = _create_backend
        factory.create_draft_extend_backend = create_draft_extend_backend

    _once(draft_utils_module, _patch)


def patch_target_verify(torch_native_module):
    """B3: TorchNativeAttnBackend.forward_extend handles TARGET_VERIFY for the topk=1 chain."""

    def _patch(m):
        import torch

        original = m.TorchNativeAttnBackend.forward_extend

        def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
            if forward_batch.forward_mode.is_target_verify():
                topk = getattr(forward_batch.spec_info, "topk", None)
                if topk != 1:
                    raise NotImplementedError(f"CPU shim B3: TARGET_VERIFY needs speculative_eagle_topk=1, got {topk}")
                bs = forward_batch.seq_lens.shape[0]
                n = q.shape[0] // bs  # draft tokens per request: a causal chain after seq_lens committed ones
                forward_batch = copy.copy(forward_batch)
                forward_batch.extend_prefix_lens = forward_batch.seq_lens.clone()
                forward_batch.extend_seq_lens = torch.full_like(forward_batch.seq_lens, n)
                forward_batch.seq_lens = forward_batch.seq_lens + n
            return original(self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)

        m.TorchNativeAttnBackend.forward_extend = forward_extend

    _once(torch_native_module, _patch)


def patch_attention_sinks(torch_native_module):
    """B5 (GPT-OSS): TorchNativeAttnBackend.forward_extend/forward_decode accept ``sinks=`` (see the module doc)."""
    m = torch_native_module
    if getattr(m, "_sglang_cpu_runtime_sinks_patched", False):
        return
    import torch

    cls = m.TorchNativeAttnBackend
    orig_extend, orig_decode = cls.forward_extend, cls.forward_decode

    def _sink_attention(self, q, k, v, layer, forward_batch, save_kv_cache, sinks, prefix_lens, q_lens):
        from sglang.srt.mem_cache.memory_pool import KVWriteLoc  # only GPT-OSS, only on the releases that pass sinks

        pool = self.token_to_kv_pool
        # Hybrid SWA pool (GPT-OSS gets one): a sliding layer's cache is indexed by translated locations.
        swa_layer = self.use_sliding_window_kv_pool and pool.layers_mapping[layer.layer_id][1]
        if save_kv_cache and k is not None and v is not None:
            pool.set_kv_buffer(layer, KVWriteLoc(forward_batch.out_cache_loc, self.swa_out_cache_loc), k, v)
        hq, hk, d, dv = layer.tp_q_head_num, layer.tp_k_head_num, layer.qk_head_dim, layer.v_head_dim
        q_ = q.reshape(-1, hq, d)
        out = q.new_empty((q_.shape[0], hq * dv))
        k_cache, v_cache = pool.get_key_buffer(layer.layer_id), pool.get_value_buffer(layer.layer_id)
        window = layer.sliding_window_size
        sink = sinks.float().view(hq, 1, 1)
        start = 0
        for i in range(forward_batch.seq_lens.shape[0]):
            n_kv, n_q, pre = int(forward_batch.seq_lens[i]), int(q_lens[i]), int(prefix_lens[i])
            toks = self.req_to_token_pool.req_to_token[forward_batch.req_pool_indices[i], :n_kv]
            if swa_layer:
                toks = pool.translate_loc_from_full_to_swa(toks)
            kk = k_cache[toks].float().repeat_interleave(hq // hk, dim=1)  # [S, hq, d]
            vv = v_cache[toks].float().repeat_interleave(hq // hk, dim=1)
            scores = torch.einsum("lhd,shd->hls", q_[start:start + n_q].float(), kk) * layer.scaling
            q_pos = torch.arange(pre, pre + n_q).unsqueeze(1)
            k_pos = torch.arange(n_kv).unsqueeze(0)
            mask = k_pos <= q_pos
            if window is not None and window > -1:
                mask &= k_pos >= q_pos - window
            scores = scores.masked_fill(~mask, float("-inf"))
            probs = torch.softmax(torch.cat([scores, sink.expand(hq, n_q, 1)], dim=-1), dim=-1)[..., :-1]
            out[start:start + n_q] = torch.einsum("hls,shd->lhd", probs, vv).reshape(n_q, hq * dv).to(out.dtype)
            start += n_q
        return out

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None, **kwargs):
        if sinks is None:
            return orig_extend(self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
        return _sink_attention(self, q, k, v, layer, forward_batch, save_kv_cache, sinks,
                               forward_batch.extend_prefix_lens, forward_batch.extend_seq_lens)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, sinks=None, **kwargs):
        if sinks is None:
            return orig_decode(self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
        return _sink_attention(self, q, k, v, layer, forward_batch, save_kv_cache, sinks,
                               forward_batch.seq_lens - 1, torch.ones_like(forward_batch.seq_lens))

    cls.forward_extend, cls.forward_decode = forward_extend, forward_decode
    m._sglang_cpu_runtime_sinks_patched = True


def patch_torch_native(torch_native_module):
    """B5 then B3 on the same module (B3 wraps B5's forward_extend, so TARGET_VERIFY with sinks works too)."""
    patch_attention_sinks(torch_native_module)
    patch_target_verify(torch_native_module)


def patch_minimax_qk_norm(minimax_m2_module):
    """B6 (MiniMax-M2): torch versions of the CUDA-only q/k RMSNorm kernels (see the module doc)."""

    def _patch(m):
        import torch

        def rms_sumsq_serial(x1, x2):
            b = x1.shape[0]
            out = torch.zeros((2 * b + 3) // 4 * 4, device=x1.device, dtype=torch.float32)
            out[:b] = x1.float().pow(2).sum(-1)
            out[b:2 * b] = x2.float().pow(2).sum(-1)
            return out

        def rms_apply_serial(x1, x2, w1, w2, sum_sq, tp_world=1, eps=1e-5):
            b, d1 = x1.shape
            d2 = x2.shape[1]
            inv1 = torch.rsqrt(sum_sq[:b] / d1 / tp_world + eps).unsqueeze(1)
            inv2 = torch.rsqrt(sum_sq[b:2 * b] / d2 / tp_world + eps).unsqueeze(1)
            return (x1.float() * inv1 * w1.float()).to(x1.dtype), (x2.float() * inv2 * w2.float()).to(x2.dtype)

        m.rms_sumsq_serial = rms_sumsq_serial
        m.rms_apply_serial = rms_apply_serial

    _once(minimax_m2_module, _patch)


def patch_no_pynccl_on_cpu(parallel_state_module):
    """B4: process groups default to gloo only (no PyNcclCommunicator on CPU)."""

    def _patch(m):
        original = m.init_model_parallel_group

        def init_model_parallel_group(*args, **kwargs):
            if kwargs.get("use_pynccl") is None:
                kwargs["use_pynccl"] = False
            return original(*args, **kwargs)

        m.init_model_parallel_group = init_model_parallel_group

    _once(parallel_state_module, _patch)


def patch_multistep_draft_backend(draft_utils_module):
    """B7: give DraftBackendFactory's multi-step draft decode map a torch_native entry (see the module doc).

    Same mechanism as B2, for ``create_decode_backend`` only: the entry is our
    ``sglang_cpu_multistep.TorchNativeMultiStepDraftBackend``, returned as ``(stamp, backend)`` where
    ``_create_backend`` has ``stamps_children`` (0.5.18+), bare and stamped here before.
    """
    m = draft_utils_module
    if getattr(m, "_sglang_cpu_runtime_multistep_patched", False):
        return
    import functools
    import inspect

    factory = m.DraftBackendFactory
    original_create = factory._create_backend
    original_decode = factory.create_decode_backend
    returns_pair = "stamps_children" in inspect.signature(original_create).parameters

    def _torch_native(self):
        from sglang_cpu_multistep import TorchNativeMultiStepDraftBackend

        backend = TorchNativeMultiStepDraftBackend(self.draft_model_runner, self.topk, self.speculative_num_steps)
        if returns_pair:
            return "torch_native", backend
        for b in (backend, *backend.attn_backends):
            b.prefill_attention_backend_str = b.decode_attention_backend_str = "torch_native"
        return backend

    @functools.wraps(original_decode)
    def create_decode_backend(self, *args, **kwargs):
        self._cpu_shim_in_draft_decode = True
        try:
            return original_decode(self, *args, **kwargs)
        finally:
            self._cpu_shim_in_draft_decode = False

    @functools.wraps(original_create)  # B2, applied after this, reads the original signature through it
    def _create_backend(self, backend_name, backend_map, error_template, *args, **kwargs):
        if getattr(self, "_cpu_shim_in_draft_decode", False) and "torch_native" not in backend_map:
            backend_map = {**backend_map, "torch_native": lambda: _torch_native(self)}
        return original_create(self, backend_name, backend_map, error_template, *args, **kwargs)

    factory._create_backend = _create_backend
    factory.create_decode_backend = create_decode_backend
    m._sglang_cpu_runtime_multistep_patched = True


def patch_tree_verify(torch_native_module):
    """B8: TorchNativeAttnBackend.forward_extend runs TARGET_VERIFY over a token tree (topk > 1) with the tree
    mask from ``spec_info.custom_mask``; everything else goes to the forward_extend below it (B3, B5)."""
    m = torch_native_module
    if getattr(m, "_sglang_cpu_runtime_tree_verify_patched", False):
        return
    cls = m.TorchNativeAttnBackend
    below = cls.forward_extend

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        spec_info = forward_batch.spec_info
        if not forward_batch.forward_mode.is_target_verify() or getattr(spec_info, "topk", 1) == 1:
            return below(self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
        if kwargs.get("sinks") is not None or (layer.sliding_window_size or -1) > -1 or self.use_sliding_window_kv_pool:
            raise NotImplementedError("CPU shim B8: tree verify with attention sinks or a sliding window")
        from sglang_cpu_multistep import tree_verify_extend

        def write_kv(cache_loc):
            try:
                from sglang.srt.mem_cache.memory_pool import KVWriteLoc
            except ImportError:  # releases whose set_kv_buffer takes the bare locations
                loc = cache_loc
            else:
                loc = KVWriteLoc(cache_loc, self.swa_out_cache_loc)
            self.token_to_kv_pool.set_kv_buffer(layer, loc, k, v)

        return tree_verify_extend(self, q, k, v, layer, forward_batch, save_kv_cache, write_kv)

    cls.forward_extend = forward_extend
    m._sglang_cpu_runtime_tree_verify_patched = True


def patch_draft_utils(draft_utils_module):
    """B7 then B2 on the same module (multi-step draft decode and draft-extend backends for torch_native).

    B7 first: B2 reads ``_create_backend``'s signature, which B7's wrapper passes through (functools.wraps)."""
    patch_multistep_draft_backend(draft_utils_module)
    patch_draft_extend_backend(draft_utils_module)


def patch_dp_padding(torch_native_module):
    """B9: TorchNativeAttnBackend.get_cpu_graph_seq_len_fill_value for DP attention's batch padding."""
    cls = torch_native_module.TorchNativeAttnBackend
    if "get_cpu_graph_seq_len_fill_value" not in vars(cls):
        cls.get_cpu_graph_seq_len_fill_value = lambda self: 1


def patch_fused_moe_native(fused_moe_native_module):
    """B12 (MiniMax-M3, LongCat-Flash: ``sglang_cpu_moe``), then B10 (Llama 4) around it, on one module."""
    import sglang_cpu_moe

    sglang_cpu_moe.patch_moe_forward_native(fused_moe_native_module)
    sglang_cpu_llama4.patch_router_weight_on_input(fused_moe_native_module)


def patch_torch_native_tree(torch_native_module):
    """B5, B3, B8 (B8 wraps B3's forward_extend and takes the topk > 1 verify batches), then B9, on one module."""
    patch_torch_native(torch_native_module)
    patch_tree_verify(torch_native_module)
    patch_dp_padding(torch_native_module)


# module name -> the patch for it; sitecustomize.py applies these lazily.
PATCHES = {
    "sglang.srt.models.deepseek_common.attention_backend_handler": patch_mla_dispatch,
    "sglang.srt.speculative.draft_utils": patch_draft_utils,  # B7, then B2
    "sglang.srt.layers.attention.torch_native_backend": patch_torch_native_tree,  # B5, B3, B8, then B9
    "sglang.srt.distributed.parallel_state": patch_no_pynccl_on_cpu,
    "sglang.srt.models.minimax_m2": patch_minimax_qk_norm,  # B6
    "sglang.srt.layers.moe.fused_moe_native": patch_fused_moe_native,  # B12, then B10
    "sglang.srt.models.llama4": sglang_cpu_llama4.patch_llama4_rope_in_place,  # B11
    "sglang.srt.managers.tokenizer_manager": sglang_cpu_kimi.patch_kimi_text_front_end,  # B14
    "sglang.srt.models.kimi_k25_eagle3": sglang_cpu_kimi.patch_mla_draft_cuda_sync,  # B15
    **sglang_cpu_linear_attn.PATCHES,  # L1-L12: Qwen3.5 / Qwen3-Next linear attention (its module doc)
}


def apply():
    """Import the patched SGLang modules and apply B1-B15 now (idempotent). Needs CPU_ENV set beforehand."""
    import importlib

    for name, patch in PATCHES.items():
        patch(importlib.import_module(name))


def is_applied(module) -> bool:
    """True when this runtime has patched ``module``."""
    return bool(getattr(module, _PATCHED, False))


def install_import_hook():
    """Patch each module in PATCHES as soon as it is imported (now, if it already is). Idempotent."""
    for name, patch in PATCHES.items():
        when_imported(name, lambda name=name, patch=patch: patch(sys.modules[name]))
