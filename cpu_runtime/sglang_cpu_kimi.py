"""The CPU runtime's two patches for serving Kimi-K2.5 (``KimiK25ForConditionalGeneration``) with its MLA EAGLE-3
draft here (B14, B15 in sglang_cpu_patches.py's list; registered in its ``PATCHES``). Never shipped.

At import time this module imports only the standard library.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

KIMI_K25 = "KimiK25ForConditionalGeneration"


def _no_processor_to_load(manager) -> bool:
    """A Kimi-K2.5 checkpoint without the released processor files, served on token ids only."""
    model_config = manager.model_config
    architectures = getattr(model_config.hf_config, "architectures", None) or []
    return (KIMI_K25 in architectures and manager.server_args.skip_tokenizer_init
            and not (Path(model_config.model_path) / "preprocessor_config.json").is_file())


def patch_kimi_text_front_end(tokenizer_manager_module):
    """B14: ``TokenizerManager.init_tokenizer_and_processor`` takes SGLang's own text-only branch for a Kimi-K2.5
    checkpoint that ships no processor, served with ``skip_tokenizer_init`` (see sglang_cpu_patches.py)."""
    cls = tokenizer_manager_module.TokenizerManager
    if getattr(cls, "_sglang_cpu_runtime_kimi_patched", False):
        return
    original = cls.init_tokenizer_and_processor

    @functools.wraps(original)
    def init_tokenizer_and_processor(self):
        if not _no_processor_to_load(self):
            return original(self)
        model_config = self.model_config
        model_config.is_multimodal = False  # the branch SGLang takes for text models and --language-model-only
        try:
            return original(self)
        finally:
            model_config.is_multimodal = True

    cls.init_tokenizer_and_processor = init_tokenizer_and_processor
    cls._sglang_cpu_runtime_kimi_patched = True


@contextlib.contextmanager
def _cuda_synchronize_is_a_no_op():
    import torch

    if torch.cuda.is_available():
        yield
        return
    original = torch.cuda.synchronize
    torch.cuda.synchronize = lambda device=None: None
    try:
        yield
    finally:
        torch.cuda.synchronize = original


def patch_mla_draft_cuda_sync(kimi_k25_eagle3_module):
    """B15: ``Eagle3DeepseekV2ForCausalLM.set_embed`` and ``set_embed_and_head`` run with ``torch.cuda.synchronize``
    a no-op when there is no CUDA device (see sglang_cpu_patches.py)."""
    cls = kimi_k25_eagle3_module.Eagle3DeepseekV2ForCausalLM
    if getattr(cls, "_sglang_cpu_runtime_sync_patched", False):
        return

    def without_cuda_sync(original):
        @functools.wraps(original)
        def method(self, *args):
            with _cuda_synchronize_is_a_no_op():
                return original(self, *args)

        return method

    cls.set_embed = without_cuda_sync(cls.set_embed)
    cls.set_embed_and_head = without_cuda_sync(cls.set_embed_and_head)
    cls._sglang_cpu_runtime_sync_patched = True
