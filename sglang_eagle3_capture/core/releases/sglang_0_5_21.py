"""SGLang 0.5.21 (wheel built 2026-10-01): as 0.5.22, but ``SpecAuxHiddenStateConfig`` has no
``draft_model_config`` (the plugin builds the draft's ModelConfig as 0.5.22 does), and the Llama, GLM-4.5 and
GLM-4.7-Flash loops still compute ``hidden_states + residual`` at layer 0 (llama.py l.441), so they cannot
capture the embedding (nor can Apertus: apertus.py l.349, nor EXAONE MoE: exaone_moe.py l.588).
``PrefillCudaGraphRunner.can_replay_locally`` has no ``contains_mm_inputs`` (l.1218). Qwen3.5 has no EAGLE-3 capture
(0.5.17-0.5.21): qwen3_5_text.py's causal LMs and the qwen3_5.py decoder stack define only
``set_dflash_layers_to_capture`` (qwen3_5_text.py l.114, qwen3_5.py l.1768), and the VL classes' inherited Qwen3-VL
hook sets only ``layers_to_capture`` (qwen3_vl.py l.1766-1780), which the stack's flag-driven loop never reads
(qwen3_5.py l.1825-1826): the family is absent. Run on CPU (docs/releases.md)."""

from dataclasses import replace

from . import sglang_0_5_22
from .schema import PROVEN_CPU_ENGINE
from .sglang_0_5_23 import eager_prefill

RELEASE = replace(sglang_0_5_22.RELEASE, version="0.5.21", built="2026-10-01", proven=PROVEN_CPU_ENGINE,
                  has_draft_model_config=False, embedding_crashes=("llama", "apertus", "exaone_moe"),
                  absent_families=(*sglang_0_5_22.RELEASE.absent_families, "qwen3_5"),
                  seams=sglang_0_5_22.RELEASE.with_seams(eager_prefill("is_mixed", "batch_max_context_len")))
