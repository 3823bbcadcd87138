"""The Gemma 3 family: ``Gemma3ForCausalLM`` (SGLang's models/gemma3_causal.py) and ``Gemma3ForConditionalGeneration``
(models/gemma3_mm.py), whose ``set_eagle3_layers_to_capture`` (543-545) delegates to its ``language_model``, a
``Gemma3ForCausalLM`` (195); dimensions in ``text_config``.

``set_eagle3_layers_to_capture`` (gemma3_causal.py:917) always adds 1 and sets ``self.model.layers_to_capture``; it
reads no pipeline group (the family reads the runtime's). ``Gemma3TextModel.forward`` (619; ``input_ids, positions,
forward_batch, input_embeds, **kwargs``) appends ``hidden_states`` to a plain list at loop index ``i`` (638-639 on
an AMX CPU, 656-657 otherwise) and loop index N itself after the loop (671-672), then runs ``self.norm(hidden_states,
residual)`` (674). Since 0.5.17 a decoder layer returns ``(post_feedforward_layernorm output, residual)`` unsummed
(408-410) and the sum is formed inside the next layer's ``input_layernorm(hidden_states, residual)`` (388): the
loop's tensor at ``i >= 1`` is layer ``i-1``'s branch output, not the residual stream HF's ``hidden_states[i]``
holds, and on CUDA ``Gemma3RMSNorm.forward_cuda`` (layers/layernorm.py:1342-1348) then overwrites it in place with
the normed input of layer ``i`` (and the embedding at index 0, which layer 0 keeps as its residual, with the running
residual). So the plugin takes the stream at each captured layer's input norm (``stream_from="input-norm"``,
:mod:`sglang_eagle3_capture.core.capture`); the final-norm hook gives N-1 and ``final_norm`` as for every family.
Sliding-window (local rope) and full (global rope) layers alternate (``layer_types``, 391-394); both take the same
capture.

Not in the family: ``EmbeddingGemmaModel`` (gemma3_causal.py:958, an embedding model: no speculative decoding).
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
