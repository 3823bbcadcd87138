"""MiniMax-M2 (minimax_m2.py): set_eagle3 1067 (+1; pipeline group from get_parallel(), 1068), MiniMaxM2Model.forward
960 (list 980, capture 990-1006), final norm 1009-1011.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import PP_FROM_RUNTIME, Family

MODULE = "sglang.srt.models.minimax_m2"

FAMILY = Family(
    name="minimax_m2",
    architectures=("MiniMaxM2ForCausalLM",),
    causal_lms=((MODULE, "MiniMaxM2ForCausalLM"),),
    models=((MODULE, "MiniMaxM2Model"),),
    stock_rule=ALWAYS_SHIFT,
    pp_group=PP_FROM_RUNTIME,
)
