"""SGLang 0.5.11 (wheel built 2026-05-07): refused; kept for the doctor's stock readings.

Every family always adds 1 (DeepSeek ``[val + 1 for val in layer_ids]``, deepseek_v2.py l.2369-2374, the last
release that did so for DeepSeek), and GLM-4.7-Flash is still a DeepSeek subclass. The loops compute
``hidden_states + residual`` inline (deepseek_v2.py l.2106), so layer id -1 crashes on DeepSeek, Llama,
GLM-4.5, GLM-4.7-Flash and GPT-OSS.
"""

from dataclasses import replace

from ...core.releases.schema import ALWAYS_SHIFT
from . import sglang_0_5_13_post1

RELEASE = replace(sglang_0_5_13_post1.RELEASE, version="0.5.11", built="2026-05-07",
                  stock_rules={"deepseek_v2": ALWAYS_SHIFT, "glm4_moe_lite": ALWAYS_SHIFT, "gpt_oss": ALWAYS_SHIFT})
