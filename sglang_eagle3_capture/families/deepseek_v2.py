"""The DeepSeek-V2 family: DeepSeek-V2/V3/V3.2/R1, Kimi-K2 and Kimi-K2.5 (read in SGLang's models/deepseek_v2.py).

``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture`` sets ``self.model.layers_to_capture`` (V3 and V32
are empty subclasses; ``kimi_k25.py``'s ``KimiK25ForConditionalGeneration`` delegates to its
``language_model``, a ``DeepseekV3ForCausalLM``, and keeps its decoder config in ``text_config``).
``DeepseekV2Model.forward`` lets decoder layer ``i`` copy the residual stream entering it into an
``AuxHiddenStatePacker`` (``layers/aux_hidden_states.py``) and returns ``(hidden, packed)``; loop index
0 is the embedding itself (the first layer boundary's ``init_residual`` returns it). The last layer's
output exists only inside the final ``self.norm(hidden, residual)`` call.
"""

from ..releases.schema import SHIFT_IF_FIRST_IS_1
from .schema import PACKED, Family

FAMILY = Family(
    name="deepseek_v2",
    architectures=("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                   "KimiK25ForConditionalGeneration"),
    module="sglang.srt.models.deepseek_v2",
    causal_lm="DeepseekV2ForCausalLM",
    model="DeepseekV2Model",
    forward_params=("self", "input_ids", "positions", "forward_batch", "input_embeds", "pp_proxy_tensors"),
    stock_rule=SHIFT_IF_FIRST_IS_1,
    container=PACKED,
    embedding_in_loop=True,
    final_norm="norm",
    text_config=("KimiK25ForConditionalGeneration",),
)
