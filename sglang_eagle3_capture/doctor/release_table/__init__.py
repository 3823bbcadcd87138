"""The releases the plugin refuses, kept for the doctor's stock readings and the README's support matrix (the plugin
never imports them), before the supported ones (:mod:`sglang_eagle3_capture.core.releases`), oldest first."""

from __future__ import annotations

from dataclasses import replace

from ...core import releases
from ...core.releases.schema import ALWAYS_SHIFT, PROVEN_REFUSED, Release

# 0.5.15.post1: no model_runner_components/ (ids resolved inline in ModelRunner.__init__, model_runner.py l.436-479),
# no layers/aux_hidden_states.py (the DeepSeek capture returns a list, deepseek_v2.py l.2667). DeepSeek adds 1 only when
# the first id is 1 and reaches the embedding; Llama, GLM-4.5, GLM-4.7-Flash and GPT-OSS still compute
# hidden_states + residual at layer 0, and GPT-OSS always adds 1 (gpt_oss.py l.1299).
_0_5_15_POST1 = Release(
    version="0.5.15.post1", built="2026-07-14", supported=False, proven=PROVEN_REFUSED,
    refused_because="it resolves the capture ids inline in ModelRunner.__init__ and its DeepSeek capture returns a "
                    "list: none of the seams the plugin patches exist in that shape",
    stock_rules={"gpt_oss": ALWAYS_SHIFT},
    # apertus.py l.356, llama4.py l.542, longcat_flash.py l.564
    embedding_crashes=("llama", "glm4_moe", "glm4_moe_lite", "gpt_oss", "apertus", "llama4", "exaone_moe",
                       "longcat_flash"),
    absent_families=("minimax_m3",))  # no minimax_m3.py / minimax_m3_vl.py in this wheel
# 0.5.13.post1: DeepSeek adds 1 only when the first id is 1 (deepseek_v2.py l.2752-2755, the first release so) but
# its loop computes hidden_states + residual inline (l.2453), so layer id -1 crashes there too.
_0_5_13_POST1 = replace(_0_5_15_POST1, version="0.5.13.post1", built="2026-06-15",
                        refused_because="its capture loops compute hidden_states + residual inline and crash at the "
                                        "embedding",
                        embedding_crashes=("deepseek_v2", *_0_5_15_POST1.embedding_crashes))
# 0.5.11: every family always adds 1 (DeepSeek [val + 1 for val in layer_ids], deepseek_v2.py l.2369-2374, the last
# release so), GLM-4.7-Flash is still a DeepSeek subclass; layer id -1 crashes as in 0.5.13.post1 (l.2106).
_0_5_11 = replace(_0_5_13_POST1, version="0.5.11", built="2026-05-07",
                  stock_rules={"deepseek_v2": ALWAYS_SHIFT, "glm4_moe_lite": ALWAYS_SHIFT, "gpt_oss": ALWAYS_SHIFT})


def all_releases() -> tuple[Release, ...]:
    """Every release with facts, supported or not, oldest first."""
    return (_0_5_11, _0_5_13_POST1, _0_5_15_POST1, *releases.supported())


def get(version: str) -> Release:
    """The facts of ``version``; KeyError naming the known releases when it has none."""
    known = {r.version: r for r in all_releases()}
    if version not in known:
        raise KeyError(f"no facts for SGLang {version}; known: {', '.join(known)}")
    return known[version]
