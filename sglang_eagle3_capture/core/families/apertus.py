"""The Apertus family: ``ApertusForCausalLM`` (SGLang's models/apertus.py; the Swiss AI Apertus models).

``set_eagle3_layers_to_capture`` (apertus.py:675) always adds 1 and sets ``self.model.layers_to_capture``; it
returns early off the last pipeline rank (676). ``ApertusModel.forward`` (345) captures the residual stream entering
layer ``i`` into an ``AuxHiddenStateList`` (365) through ``capture_output=`` (371-373); loop index 0 is the embedding
from 0.5.22 (0.5.17-0.5.21 append ``hidden_states + residual`` with no residual at index 0, apertus.py:352 in 0.5.20:
a TypeError); the loop ends at N-1, so loop index N is dropped silently; the final norm is
``residual_batch.final_norm(hidden_states, forward_batch, self.norm)`` (378-380). A decoder layer's norms are
``attention_layernorm`` and ``feedforward_layernorm`` (265-268), not ``input_layernorm``.
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
