"""SGLang 0.5.15.post1 (wheel built 2026-07-14): refused; kept for the doctor's stock readings.

No ``model_runner_components/`` (ids are resolved inline in ``ModelRunner.__init__``, model_runner.py
l.436-479) and no ``layers/aux_hidden_states.py`` (the DeepSeek capture returns a Python list, deepseek_v2.py
l.2667). DeepSeek adds 1 only when the first id is 1 and reaches the embedding (communicator path); Llama,
GLM-4.5, GLM-4.7-Flash and GPT-OSS still compute ``hidden_states + residual`` at layer 0, and GPT-OSS always
adds 1 (gpt_oss.py l.1299).
"""

from ...core.releases.schema import ALWAYS_SHIFT, PROVEN_REFUSED, Release

RELEASE = Release(
    version="0.5.15.post1",
    built="2026-07-14",
    supported=False,
    proven=PROVEN_REFUSED,
    refused_because="it resolves the capture ids inline in ModelRunner.__init__ and its DeepSeek capture returns a "
                    "list: none of the seams the plugin patches exist in that shape",
    stock_rules={"gpt_oss": ALWAYS_SHIFT},
    # apertus.py l.356, llama4.py l.542, longcat_flash.py l.564
    embedding_crashes=("llama", "glm4_moe", "glm4_moe_lite", "gpt_oss", "apertus", "llama4",
                       "exaone_moe", "longcat_flash"),
    absent_families=("minimax_m3",),  # no minimax_m3.py / minimax_m3_vl.py in this wheel
)
