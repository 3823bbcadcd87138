"""GLM-4.7-Flash (glm4_moe_lite.py): set_eagle3 805 (DeepSeek's reading), Glm4MoeLiteModel.forward 610 (a list, 647, not
the packer), final norm 674-678.
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
