"""Qwen2, Qwen2.5-VL (qwen2.py, qwen2_5_vl.py:670): set_eagle3 qwen2.py:781 and qwen2_5_vl.py:990 (+1),
Qwen2Model.forward 434 (list 455), final norm 468-470.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.qwen2"

FAMILY = Family(
    name="qwen2",
    architectures=("Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration"),
    causal_lms=((MODULE, "Qwen2ForCausalLM"),
                ("sglang.srt.models.qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration")),
    models=((MODULE, "Qwen2Model"),),
    stock_rule=ALWAYS_SHIFT,
    text_config=("Qwen2_5_VLForConditionalGeneration",),
)
