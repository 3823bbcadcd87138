"""Apertus (apertus.py): set_eagle3 675 (+1), ApertusModel.forward 345 (list 365, capture 371-373), final norm 378-380;
a layer's input norm is attention_layernorm (265-268).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.apertus"

FAMILY = Family(
    name="apertus",
    architectures=("ApertusForCausalLM",),
    causal_lms=((MODULE, "ApertusForCausalLM"),),
    models=((MODULE, "ApertusModel"),),
    stock_rule=ALWAYS_SHIFT,
    input_norm="attention_layernorm",
)
