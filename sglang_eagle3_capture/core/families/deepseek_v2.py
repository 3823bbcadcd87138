"""The DeepSeek-V2 family: DeepSeek-V2/V3/V3.2/R1, Kimi-K2/K2.5, GLM-5 (DSA) and Mistral-Large-3 (SGLang's
models/deepseek_v2.py).

``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture`` (deepseek_v2.py:3458) sets ``self.model.layers_to_capture``;
V3 and V32 are empty subclasses, ``GlmMoeDsaForCausalLM`` (glm4_moe.py:1284) and ``MistralLarge3ForCausalLM``
(mistral_large_3.py:12, a V3 subclass) inherit both it and ``DeepseekV2Model``; ``kimi_k25.py``'s
``KimiK25ForConditionalGeneration`` delegates to its ``language_model``, a ``DeepseekV3ForCausalLM``, and keeps its
decoder config in ``text_config``. ``DeepseekV2Model.forward`` (3094) lets decoder layer ``i`` copy the residual
stream entering it into an ``AuxHiddenStatePacker`` (3175, ``layers/aux_hidden_states.py``) and returns
``(hidden, packed)``; loop index 0 is the embedding itself. The last layer's output exists only inside the final
``self.norm(hidden, residual)`` call (3238-3241); a loop index N makes the packer raise ``captured k of K``.
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
