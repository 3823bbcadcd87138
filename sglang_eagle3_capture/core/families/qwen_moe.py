"""Qwen3-MoE, Qwen2-MoE, Mellum (qwen3_moe.py, qwen2_moe.py, mellum.py:479): set_eagle3 qwen3_moe.py:1128 and
qwen2_moe.py:1418 (+1) into Qwen2MoeModel's 1153 (a never-cleared flag), forward 1158 (reads the flag 1199-1202, list
1178), final norm 1208-1210.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import N_INDEX_ERROR, Family

FAMILY = Family(
    name="qwen_moe",
    architectures=("Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM", "MellumForCausalLM"),
    causal_lms=(("sglang.srt.models.qwen3_moe", "Qwen3MoeForCausalLM"),
                ("sglang.srt.models.qwen2_moe", "Qwen2MoeForCausalLM")),
    models=(("sglang.srt.models.qwen2_moe", "Qwen2MoeModel"),),
    stock_rule=ALWAYS_SHIFT,
    stock_past_loop=N_INDEX_ERROR,
    layer_flag="_is_layer_to_capture",
)
