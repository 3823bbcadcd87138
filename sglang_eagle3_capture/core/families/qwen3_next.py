"""Qwen3-Next (qwen3_next.py): set_eagle3 1286 (+1) into Qwen3NextModel's 954 (a never-cleared flag), forward 964
(inputs_embeds 970, reads the flag 991-993, list 982), final norm 997-1000.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, N_INDEX_ERROR, Family

MODULE = "sglang.srt.models.qwen3_next"

FAMILY = Family(
    name="qwen3_next",
    architectures=("Qwen3NextForCausalLM",),
    causal_lms=((MODULE, "Qwen3NextForCausalLM"),),
    models=((MODULE, "Qwen3NextModel"),),
    stock_rule=ALWAYS_SHIFT,
    stock_past_loop=N_INDEX_ERROR,
    layer_flag="_is_layer_to_capture",
    forward_params=(*FORWARD_PARAMS[:4], "inputs_embeds"),
    embeds_param="inputs_embeds",
    attn=None,
)
