"""Qwen3-VL and the wrappers inheriting its hook (qwen3_vl.py; qwen3_vl_moe.py:197, cosmos3.py:38, interns1pro.py:191):
set_eagle3 1777 (+1), Qwen3LLMModel.forward 1207 and Qwen3MoeLLMModel.forward (qwen3_vl_moe.py:85; capture
qwen3_vl.py:1234-1237), final norm 1283-1290; deepstack is added to layer k's output (1263-1272) before layer k+1
captures it (docs/families.md, qwen3_vl).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, Family

MODULE = "sglang.srt.models.qwen3_vl"
ARCHITECTURES = ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
                 "Cosmos3ForConditionalGeneration", "InternS1ProForConditionalGeneration")

FAMILY = Family(
    name="qwen3_vl",
    architectures=ARCHITECTURES,
    causal_lms=((MODULE, "Qwen3VLForConditionalGeneration"),),
    models=((MODULE, "Qwen3LLMModel"), ("sglang.srt.models.qwen3_vl_moe", "Qwen3MoeLLMModel")),
    stock_rule=ALWAYS_SHIFT,
    forward_params=(*FORWARD_PARAMS, "input_deepstack_embeds"),
    text_config=ARCHITECTURES,
    deepstack="vision_config.deepstack_visual_indexes",
)
