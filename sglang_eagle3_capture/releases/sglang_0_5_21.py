"""SGLang 0.5.21 (wheel built 2026-10-01): as 0.5.22, but ``SpecAuxHiddenStateConfig`` has no
``draft_model_config`` (the plugin builds the draft's ModelConfig as 0.5.22 does), and the Llama, GLM-4.5 and
GLM-4.7-Flash loops still compute ``hidden_states + residual`` at layer 0 (llama.py l.441), so they cannot
capture the embedding (nor can Apertus: apertus.py l.349, nor EXAONE MoE: exaone_moe.py l.588).
``PrefillCudaGraphRunner.can_replay_locally`` has no ``contains_mm_inputs`` (l.1218). Run on CPU (docs/releases.md)."""

from dataclasses import replace

from . import sglang_0_5_22
from .schema import PROVEN_CPU_ENGINE
from .sglang_0_5_23 import eager_prefill

RELEASE = replace(sglang_0_5_22.RELEASE, version="0.5.21", built="2026-10-01", proven=PROVEN_CPU_ENGINE,
                  has_draft_model_config=False, embedding_crashes=("llama", "apertus", "exaone_moe"),
                  seams=sglang_0_5_22.RELEASE.with_seams(eager_prefill("is_mixed", "batch_max_context_len")))
