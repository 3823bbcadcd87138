"""Gemma 4 (gemma4_causal.py, gemma4_mm.py): set_eagle3 1495 (+1), Gemma4TextModel.forward 1024 (list 1059, capture
1072-1074, loop index N itself 1093-1094), final norm 1096-1098; the multimodal class sets its language_model's list
itself (gemma4_mm.py:1155-1168).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, Family

MODULE = "sglang.srt.models.gemma4_causal"
MM_MODULE = "sglang.srt.models.gemma4_mm"

FAMILY = Family(
    name="gemma4",
    architectures=("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"),
    causal_lms=((MODULE, "Gemma4ForCausalLM"), (MM_MODULE, "Gemma4ForConditionalGeneration")),
    models=((MODULE, "Gemma4TextModel"),),
    stock_rule=ALWAYS_SHIFT,
    forward_params=(*FORWARD_PARAMS[:5], "per_layer_inputs", "pp_proxy_tensors", "kwargs"),
    text_config=("Gemma4ForConditionalGeneration",),
    model_attrs=(("Gemma4ForConditionalGeneration", "language_model"),),
)
