"""SGLang 0.5.21 (wheel built 2026-10-01), run on CPU: as 0.5.22, but ``SpecAuxHiddenStateConfig`` has no
``draft_model_config``; the Llama loop adds ``hidden_states + residual`` at layer 0 (llama.py l.441; Apertus
apertus.py l.349, EXAONE MoE exaone_moe.py l.588); ``can_replay_locally`` has no ``contains_mm_inputs`` (l.1218);
Qwen3.5 defines only ``set_dflash_layers_to_capture`` (qwen3_5_text.py l.114), so the family is absent
(0.5.17-0.5.21)."""

from dataclasses import replace

from . import sglang_0_5_22
from .schema import PROVEN_CPU_ENGINE
from .sglang_0_5_23 import eager_prefill

RELEASE = replace(sglang_0_5_22.RELEASE, version="0.5.21", built="2026-10-01", proven=PROVEN_CPU_ENGINE,
                  has_draft_model_config=False, embedding_crashes=("llama", "apertus", "exaone_moe"),
                  absent_families=(*sglang_0_5_22.RELEASE.absent_families, "qwen3_5"),
                  seams=sglang_0_5_22.RELEASE.with_seams(eager_prefill("is_mixed", "batch_max_context_len")))
