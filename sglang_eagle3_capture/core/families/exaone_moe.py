"""EXAONE MoE (exaone_moe.py): set_eagle3 866 (+1; pipeline group from get_parallel(), 867), ExaoneMoEModel.forward 579
(list 599, capture 606-608), final norm 612-614.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import PP_FROM_RUNTIME, Family

MODULE = "sglang.srt.models.exaone_moe"

FAMILY = Family(
    name="exaone_moe",
    architectures=("ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM"),
    causal_lms=((MODULE, "ExaoneMoEForCausalLM"),),
    models=((MODULE, "ExaoneMoEModel"),),
    stock_rule=ALWAYS_SHIFT,
    pp_group=PP_FROM_RUNTIME,
)
