"""MiniMax-M3 (minimax_m3.py, minimax_m3_vl.py): set_eagle3 2056 and minimax_m3_vl.py:246 (+1, a never-cleared
_is_layer_to_capture), MiniMaxM3Model.forward 1901 (reads the flag 1944-1949; loop index N at its final norm 1954-1965).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.minimax_m3"
VL_MODULE = "sglang.srt.models.minimax_m3_vl"

FAMILY = Family(
    name="minimax_m3",
    architectures=("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration"),
    causal_lms=((MODULE, "MiniMaxM3SparseForCausalLM"), (VL_MODULE, "MiniMaxM3SparseForConditionalGeneration")),
    models=((MODULE, "MiniMaxM3Model"),),
    stock_rule=ALWAYS_SHIFT,
    layer_flag="_is_layer_to_capture",
    text_config=("MiniMaxM3SparseForConditionalGeneration",),
)
