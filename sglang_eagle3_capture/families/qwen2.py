"""The Qwen2 family: ``Qwen2ForCausalLM`` (SGLang's models/qwen2.py).

``set_eagle3_layers_to_capture`` (qwen2.py:781) always adds 1 and sets ``self.model.layers_to_capture``.
``Qwen2Model.forward`` (434) captures the residual stream entering layer ``i`` into an ``AuxHiddenStateList``
(455) through ``capture_output=``; loop index 0 is the embedding in every release (guarded before 0.5.21,
``snapshot`` in 0.5.21); loop index N is dropped silently; the final norm is ``final_norm(..., self.norm,
skip_empty=True)`` (468-470). ``Qwen3Model`` subclasses ``Qwen2Model`` with its own forward: its own family.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.qwen2"

FAMILY = Family(
    name="qwen2",
    architectures=("Qwen2ForCausalLM",),
    causal_lms=((MODULE, "Qwen2ForCausalLM"),),
    models=((MODULE, "Qwen2Model"),),
    stock_rule=ALWAYS_SHIFT,
)
