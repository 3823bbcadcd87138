"""The GLM-4.7-Flash family: ``Glm4MoeLiteForCausalLM`` (SGLang's models/glm4_moe_lite.py), MLA like DeepSeek but
its own classes from 0.5.13.post1 (in 0.5.11 it was a ``DeepseekV2ForCausalLM`` subclass).

``set_eagle3_layers_to_capture`` (glm4_moe_lite.py:805) reads ids as DeepSeek does (+1 only when the first id is
1, else as loop indices). ``Glm4MoeLiteModel.forward`` (610) captures into an ``AuxHiddenStateList`` (647)
through ``capture_output=``, not DeepSeek's packer, so an id the loop misses is dropped silently; loop index 0 is
the embedding from 0.5.21 (``hidden_states + residual`` crashed before, glm4_moe_lite.py:837 in 0.5.20); the final
norm is skipped on idle batches (674-678); under two-batch overlap the layers from ``first_k_dense_replace`` on
run without capture.
"""

from ..releases.schema import SHIFT_IF_FIRST_IS_1
from .schema import Family

MODULE = "sglang.srt.models.glm4_moe_lite"

FAMILY = Family(
    name="glm4_moe_lite",
    architectures=("Glm4MoeLiteForCausalLM",),
    causal_lms=((MODULE, "Glm4MoeLiteForCausalLM"),),
    models=((MODULE, "Glm4MoeLiteModel"),),
    stock_rule=SHIFT_IF_FIRST_IS_1,
)
