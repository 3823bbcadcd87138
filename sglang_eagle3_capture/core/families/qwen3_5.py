"""Qwen3.5 (qwen3_5_text.py, qwen3_5.py): set_eagle3 qwen3_5_text.py:150, and on the VL classes Qwen3-VL's
(qwen3_vl.py:1777), set on them; the stack's qwen3_5.py:1894 (a never-cleared flag), forward 1908 (reads the flag
1947-1953, list 1940), final norm 1972-1978.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, N_INDEX_ERROR, Family

MODULE = "sglang.srt.models.qwen3_5"
TEXT = "sglang.srt.models.qwen3_5_text"
VL = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")

FAMILY = Family(
    name="qwen3_5",
    architectures=("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", *VL),
    causal_lms=((TEXT, "Qwen3_5ForCausalLM"), *((MODULE, cls) for cls in VL)),
    models=((MODULE, "Qwen3_5ForCausalLM"),),
    stock_rule=ALWAYS_SHIFT,
    stock_past_loop=N_INDEX_ERROR,
    layer_flag="_is_layer_to_capture",
    forward_params=(*FORWARD_PARAMS, "input_deepstack_embeds"),
    text_config=VL,
    attn=None,
)
