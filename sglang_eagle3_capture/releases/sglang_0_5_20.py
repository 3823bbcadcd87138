"""SGLang 0.5.20 (wheel built 2026-09-18): as 0.5.21 for the plugin's seams (read from the wheel); the
GLM-4.5 and GLM-4.7-Flash loops also add ``hidden_states + residual`` at layer 0 (glm4_moe.py l.1102,
glm4_moe_lite.py l.837)."""

from dataclasses import replace

from . import sglang_0_5_21
from .schema import PROVEN_SEAM_PROBE

RELEASE = replace(sglang_0_5_21.RELEASE, version="0.5.20", built="2026-09-18", proven=PROVEN_SEAM_PROBE,
                  embedding_crashes=("llama", "glm4_moe", "glm4_moe_lite"))
