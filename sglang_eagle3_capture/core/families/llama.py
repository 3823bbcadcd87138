"""The Llama family: ``LlamaForCausalLM`` and the SGLang classes that reuse its ``set_eagle3_layers_to_capture`` and
capture loop (SGLang's models/llama.py, mistral.py, ministral3.py, teleflm.py).

``LlamaForCausalLM.set_eagle3_layers_to_capture`` (llama.py:929) always adds 1 and sets
``self.model.layers_to_capture``; ``Phi3``, ``InternLM3``, ``IQuestCoder`` (llama.py:956-964) and ``Mistral``
(mistral.py:33; its subclass ``MistralForCausalLMMistralFormat``, mistral.py:37, has no registry entry) are empty
subclasses, ``Ministral3ForCausalLM``
(ministral3.py:162) builds ``Ministral3Model(LlamaModel)``, which inherits ``LlamaModel.forward``, and
``TeleFLMForCausalLM`` (teleflm.py:81) builds ``TeleFLMModel(LlamaModel)``, whose own forward scales the embedding
and calls ``super().forward(...)`` (teleflm.py:59-79). ``LlamaModel.forward`` (llama.py:465) captures the residual
stream entering layer ``i`` into an ``AuxHiddenStateList`` (485) through ``capture_output=`` for ``i in
layers_to_capture``; loop index 0 is the embedding (it crashed with ``hidden_states + residual`` before 0.5.22,
llama.py:441 in 0.5.21); the loop ends at N-1, so loop index N is dropped silently; the final norm is
``residual_batch.final_norm(hidden_states, forward_batch, self.norm)`` (498-500).

Not in the family: ``Llama4ForCausalLM`` (llama4.py:546) subclasses ``LlamaForCausalLM`` but builds its own
``Llama4Model``: the llama4 family patches the method on it (core/families/llama4.py); the composition wrappers
(llava, janus-pro, ...) define no ``set_eagle3_layers_to_capture`` and cannot serve EAGLE-3 at all.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

FAMILY = Family(
    name="llama",
    architectures=("LlamaForCausalLM", "Phi3ForCausalLM", "InternLM3ForCausalLM", "IQuestCoderForCausalLM",
                   "MistralForCausalLM", "Ministral3ForCausalLM", "TeleFLMForCausalLM"),
    causal_lms=(("sglang.srt.models.llama", "LlamaForCausalLM"),),
    models=(("sglang.srt.models.llama", "LlamaModel"), ("sglang.srt.models.teleflm", "TeleFLMModel")),
    stock_rule=ALWAYS_SHIFT,
)
