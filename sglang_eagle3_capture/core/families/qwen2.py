"""The Qwen2 family: ``Qwen2ForCausalLM`` (SGLang's models/qwen2.py) and ``Qwen2_5_VLForConditionalGeneration``
(qwen2_5_vl.py:670), whose language model is the same ``Qwen2Model`` (720).

``set_eagle3_layers_to_capture`` (qwen2.py:781; qwen2_5_vl.py:990, no pipeline check there: the plugin's configure
checks it for both) always adds 1 and sets ``self.model.layers_to_capture``. ``Qwen2Model.forward`` (434) captures
the residual stream entering layer ``i`` into an ``AuxHiddenStateList`` (455) through ``capture_output=``; loop index
0 is the embedding in every release (guarded before 0.5.21, ``snapshot`` in 0.5.21; for Qwen2.5-VL the
``input_embeds`` with the vision features merged in, ``general_mm_embed_routine``); loop index N is dropped silently;
the final norm is ``final_norm(..., self.norm, skip_empty=True)`` (468-470). Qwen2.5-VL has no deepstack: its layer
ids mean what they mean for Qwen2. ``Qwen3Model`` subclasses ``Qwen2Model`` with its own forward: its own family.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.qwen2"

FAMILY = Family(
    name="qwen2",
    architectures=("Qwen2ForCausalLM", "Qwen2_5_VLForConditionalGeneration"),
    causal_lms=((MODULE, "Qwen2ForCausalLM"),
                ("sglang.srt.models.qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration")),
    models=((MODULE, "Qwen2Model"),),
    stock_rule=ALWAYS_SHIFT,
    text_config=("Qwen2_5_VLForConditionalGeneration",),
)
