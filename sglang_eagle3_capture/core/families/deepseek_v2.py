"""DeepSeek-V2/V3/V3.2, Kimi-K2.5, GLM-5, Mistral-Large-3 (deepseek_v2.py): set_eagle3 3458, DeepseekV2Model.forward
3094 (packer 3175), final norm 3238-3241; Kimi-K2.5 keeps its dimensions in text_config.
"""

from ..releases.schema import SHIFT_IF_FIRST_IS_1
from .schema import N_COUNT_ERROR, PACKED, Family

MODULE = "sglang.srt.models.deepseek_v2"

FAMILY = Family(
    name="deepseek_v2",
    architectures=("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                   "KimiK25ForConditionalGeneration", "GlmMoeDsaForCausalLM", "MistralLarge3ForCausalLM"),
    causal_lms=((MODULE, "DeepseekV2ForCausalLM"),),
    models=((MODULE, "DeepseekV2Model"),),
    stock_rule=SHIFT_IF_FIRST_IS_1,
    container=PACKED,
    stock_past_loop=N_COUNT_ERROR,
    text_config=("KimiK25ForConditionalGeneration",),
)
