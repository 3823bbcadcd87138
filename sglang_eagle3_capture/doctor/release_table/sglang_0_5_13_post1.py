"""SGLang 0.5.13.post1 (wheel built 2026-06-15): refused; kept for the doctor's stock readings.

DeepSeek adds 1 only when the first id is 1 (deepseek_v2.py l.2752-2755, the first release with that
reading) but its loop computes ``hidden_states + residual`` inline (l.2453), so layer id -1 crashes; Llama,
GLM-4.5, GLM-4.7-Flash and GPT-OSS crash there too, and GPT-OSS always adds 1.
"""

from dataclasses import replace

from . import sglang_0_5_15_post1

RELEASE = replace(sglang_0_5_15_post1.RELEASE, version="0.5.13.post1", built="2026-06-15",
                  refused_because="its capture loops compute hidden_states + residual inline and crash at the "
                                  "embedding",
                  embedding_crashes=("deepseek_v2", "llama", "glm4_moe", "glm4_moe_lite", "gpt_oss", "apertus",
                                     "llama4", "exaone_moe", "longcat_flash"))
