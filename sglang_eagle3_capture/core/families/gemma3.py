"""Gemma 3 (gemma3_causal.py; gemma3_mm.py:543-545 delegates): set_eagle3 917 (+1, no pipeline group),
Gemma3TextModel.forward 619 (a plain list 638-639, 656-657; loop index N itself 671-672); a layer returns its branch
output and the residual unsummed (408-410).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, PP_FROM_RUNTIME, STREAM_FROM_INPUT_NORM, Family

MODULE = "sglang.srt.models.gemma3_causal"

FAMILY = Family(
    name="gemma3",
    architectures=("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"),
    causal_lms=((MODULE, "Gemma3ForCausalLM"),),
    models=((MODULE, "Gemma3TextModel"),),
    stock_rule=ALWAYS_SHIFT,
    pp_group=PP_FROM_RUNTIME,
    forward_params=(*FORWARD_PARAMS[:5], "kwargs"),
    text_config=("Gemma3ForConditionalGeneration",),
    stream_from=STREAM_FROM_INPUT_NORM,
)
