"""Llama 4 (mllama4.py, llama4.py): Llama4ForCausalLM (546) inherits LlamaForCausalLM's set_eagle3 (+1) but builds
Llama4Model (477), so the hook is patched on it; forward 509 (list 522, capture 529-531), final norm 535-538; the
wrapper delegates (mllama4.py:971-973).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.llama4"

FAMILY = Family(
    name="llama4",
    architectures=("Llama4ForConditionalGeneration",),
    causal_lms=((MODULE, "Llama4ForCausalLM"),),
    models=((MODULE, "Llama4Model"),),
    stock_rule=ALWAYS_SHIFT,
    text_config=("Llama4ForConditionalGeneration",),
)
