"""The MiniMax-M2 family: ``MiniMaxM2ForCausalLM`` (SGLang's models/minimax_m2.py).

``set_eagle3_layers_to_capture`` (minimax_m2.py:1067) always adds 1, sets ``self.model.layers_to_capture`` and
returns early off the last pipeline rank, read from ``get_parallel().pp_group`` (1068). ``MiniMaxM2Model.forward``
(960) passes the gathered-residual collector to layer ``i`` when ``i in layers_to_capture`` (990-1006) into an
``AuxHiddenStateList`` (980); loop index 0 is the embedding in every release; loop index N is dropped silently;
final norm ``final_norm(..., skip_empty=True)`` (1009-1011); under two-batch overlap no layer captures.
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
