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
    decode (speculative_num_steps >= 2) stays unsupported and keeps SGLang's error.
B3  sglang.srt.layers.attention.torch_native_backend
    ``TorchNativeAttnBackend.forward_extend`` in TARGET_VERIFY mode: the verify batch carries no
    extend_prefix_lens/extend_seq_lens. For topk == 1 the draft "tree" is a chain, so verify is a plain
    causal extend of ``num_draft_tokens`` tokens after ``seq_lens`` committed ones; we fill those lengths
    in. topk > 1 needs a tree mask and raises.
B4  sglang.srt.distributed.parallel_state
    ``init_model_parallel_group`` defaults ``use_pynccl`` to True, and ``GroupCoordinator.__init__`` then builds
    a PyNcclCommunicator when ``world_size > 1``, which fails on CPU ("Expected a cuda device, but got: cpu").
    We default ``use_pynccl=False`` (gloo only), so ``--tp-size 2`` runs on CPU (with
    ``SGLANG_CPU_OMP_THREADS_BIND``); at TP 1 no communicator is built either way.

``apply()`` imports the three modules and patches them now. ``install_import_hook()`` (called by
``sitecustomize.py`` in this folder at interpreter start-up) patches each module right after it is first
imported instead, through the same after-import helper the plugin uses
(``sglang_eagle3_capture.serving.after_import``), so processes that never import them pay nothing. Both
are idempotent. At import time this module imports only the standard library and that helper.
"""

import copy
import os
import sys
from pathlib import Path

from sglang_eagle3_capture.serving.after_import import when_imported

SHIM_DIR = Path(__file__).resolve().parent

# The environment SGLang needs to take its CPU path here. TORCHDYNAMO_DISABLE avoids a ~25 s inductor
# compile of biased_grouped_topk per process (and needs no gcc); the tests run fp32 where it is exact.
CPU_ENV = {
    "SGLANG_USE_CPU_ENGINE": "1",  # sglang.srt.utils.is_cpu() -> True
    "TRITON_INTERPRET": "1",  # SGLang's Triton tree kernels run on CPU only interpreted
    "TORCHDYNAMO_DISABLE": "1",
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


# module name -> the patch for it; sitecustomize.py applies these lazily.
PATCHES = {
    "sglang.srt.models.deepseek_common.attention_backend_handler": patch_mla_dispatch,
    "sglang.srt.speculative.draft_utils": patch_draft_extend_backend,
    "sglang.srt.layers.attention.torch_native_backend": patch_target_verify,
    "sglang.srt.distributed.parallel_state": patch_no_pynccl_on_cpu,
}


def apply():
    """Import the patched SGLang modules and apply B1-B4 now (idempotent). Needs CPU_ENV set beforehand."""
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
