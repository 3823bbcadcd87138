"""SGLang 0.5.20 (wheel built 2026-09-18): as 0.5.21 (read from the wheel); the GLM-4.5, GLM-4.7-Flash and Llama 4
loops also add ``hidden_states + residual`` at layer 0 (glm4_moe.py l.1102, glm4_moe_lite.py l.837, llama4.py
l.537); the residual passes between layers through ``layers/communicator.py`` (no ``forward_batch.residual_stream``),
so the self-check reads input-norm operands or the all-reduce-fusion output; ``can_replay_locally`` ends at
``lora_ineligible``."""

from dataclasses import replace

from . import sglang_0_5_21
from .schema import FUSED_NORM, NORM_OPERANDS, PROVEN_SEAM_PROBE
from .sglang_0_5_23 import eager_prefill, metrics_init

RELEASE = replace(sglang_0_5_21.RELEASE, version="0.5.20", built="2026-09-18", proven=PROVEN_SEAM_PROBE,
                  # longcat_flash.py l.665 appends hidden_states + residual (residual None at loop index 0)
                  embedding_crashes=("llama", "glm4_moe", "glm4_moe_lite", "apertus", "llama4", "exaone_moe",
                                     "longcat_flash"),
                  # scheduler.py: init_metrics_collector(self, tp_rank, pp_rank, dp_rank) through 0.5.20
                  seams=sglang_0_5_21.RELEASE.with_seams(eager_prefill(),
                                                         metrics_init("tp_rank", "pp_rank", "dp_rank")),
                  selfcheck_routes=(NORM_OPERANDS, FUSED_NORM))
