"""GLM-4.5/4.6 (glm4_moe.py): set_eagle3 1269 (+1), Glm4MoeModel.forward 917 (list 948), final norm 973-977."""

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
