"""LongCat-Flash (longcat_flash.py): set_eagle3 1112 (+1, no pipeline group), LongcatFlashModel.forward 593 (a plain
list, snapshot 619-623), final norm 634-636; the layer count is num_layers where num_hidden_layers is absent
(configs/longcat_flash.py:81-83); a layer's norms and attentions are pairs, the first reads the stream entering it.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, PP_FROM_RUNTIME, Family

MODULE = "sglang.srt.models.longcat_flash"

FAMILY = Family(
    name="longcat_flash",
    architectures=("LongcatFlashForCausalLM",),
    causal_lms=((MODULE, "LongcatFlashForCausalLM"),),
    models=((MODULE, "LongcatFlashModel"),),
    stock_rule=ALWAYS_SHIFT,
    forward_params=FORWARD_PARAMS[:5],
    pp_group=PP_FROM_RUNTIME,
    layer_count_keys=("num_hidden_layers", "num_layers"),
    input_norm="input_layernorm.0",
    attn="self_attn.0",
)
