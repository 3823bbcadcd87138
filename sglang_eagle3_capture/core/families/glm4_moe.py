"""The GLM-4.5/4.6 family: ``Glm4MoeForCausalLM`` (SGLang's models/glm4_moe.py).

``set_eagle3_layers_to_capture`` (glm4_moe.py:1269) always adds 1 and sets ``self.model.layers_to_capture``.
``Glm4MoeModel.forward`` (917) captures the residual stream entering layer ``i`` into an ``AuxHiddenStateList``
(948) through ``capture_output=``; loop index 0 is the embedding from 0.5.21 (``hidden_states + residual``
crashed before, glm4_moe.py:1102 in 0.5.20); loop index N is dropped silently; the final norm is skipped on idle
batches (973-977); under two-batch overlap the layers from ``first_k_dense_replace`` on run without capture.
``GlmMoeDsaForCausalLM`` in the same module is a DeepSeek-V2 subclass: the ``deepseek_v2`` family.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.glm4_moe"

FAMILY = Family(
    name="glm4_moe",
    architectures=("Glm4MoeForCausalLM",),
    causal_lms=((MODULE, "Glm4MoeForCausalLM"),),
    models=((MODULE, "Glm4MoeModel"),),
    stock_rule=ALWAYS_SHIFT,
)
