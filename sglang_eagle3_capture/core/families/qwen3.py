"""The Qwen3 family: ``Qwen3ForCausalLM`` (SGLang's models/qwen3.py).

``set_eagle3_layers_to_capture`` (qwen3.py:778) always adds 1 and sets ``self.model.layers_to_capture``.
``Qwen3Model(Qwen2Model)`` (490) has its own forward (506, from 0.5.21; before, it ran ``Qwen2Model.forward``,
which the patch then wraps on ``Qwen3Model`` itself): an ``AuxHiddenStateList`` (523) filled through
``capture_output=``; loop index 0 is the embedding in every release; loop index N is dropped silently; final norm
``final_norm(..., skip_empty=True)`` (535-537); it returns ``(h, aux) if aux else h``.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.qwen3"

FAMILY = Family(
    name="qwen3",
    architectures=("Qwen3ForCausalLM",),
    causal_lms=((MODULE, "Qwen3ForCausalLM"),),
    models=((MODULE, "Qwen3Model"),),
    stock_rule=ALWAYS_SHIFT,
)
