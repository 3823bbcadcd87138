"""The Gemma 4 family: ``Gemma4ForCausalLM`` (SGLang's models/gemma4_causal.py), text-only checkpoints, and
``Gemma4ForConditionalGeneration`` (models/gemma4_mm.py), the same decoder stack as its ``language_model``.

``set_eagle3_layers_to_capture`` (gemma4_causal.py:1495) always adds 1 and sets ``self.model.layers_to_capture``.
``Gemma4TextModel.forward`` (1024; it also takes ``per_layer_inputs``, Gemma 4's per-layer embeddings, and
``**kwargs``) captures the residual stream entering layer ``i`` into an ``AuxHiddenStateList`` (1059) through
``capture_output=`` (1072-1074): each layer writes the whole stream at its FFN exit (``layer_scalar`` applied); loop
index 0 is the scaled embedding. SGLang captures loop index N itself, pre-norm, when it is listed (1093-1094); the
plugin never lists it (its own final-norm hook takes N-1, as for every family); final norm
``residual_batch.final_norm(hidden_states, forward_batch, self.norm)`` (1096-1098). Sliding-window and full-attention
layers alternate (``layer_types``); both run the same capture.

``Gemma4ForConditionalGeneration.set_eagle3_layers_to_capture`` (gemma4_mm.py:1155-1168) does not delegate: it reads
the layer count from ``config.text_config`` and sets ``self.language_model.layers_to_capture`` (``language_model`` is
the ``Gemma4TextModel``, 242; its own ``pp_group``, 191) with the same +1; its forward hands the stack the merged
embeddings (``general_mm_embed_routine``, 699-712: vision/audio features replace the embedding rows of their
placeholder tokens, so layer id -1 is the merged ``input_embeds``, as HF's ``hidden_states[0]``; no deepstack).
``Gemma4UnifiedForConditionalGeneration`` (gemma4_unified.py:130) inherits it but is not proven here: not listed.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, Family

MODULE = "sglang.srt.models.gemma4_causal"
MM_MODULE = "sglang.srt.models.gemma4_mm"

FAMILY = Family(
    name="gemma4",
    architectures=("Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"),
    causal_lms=((MODULE, "Gemma4ForCausalLM"), (MM_MODULE, "Gemma4ForConditionalGeneration")),
    models=((MODULE, "Gemma4TextModel"),),
    stock_rule=ALWAYS_SHIFT,
    forward_params=(*FORWARD_PARAMS[:5], "per_layer_inputs", "pp_proxy_tensors", "kwargs"),
    text_config=("Gemma4ForConditionalGeneration",),
    model_attrs=(("Gemma4ForConditionalGeneration", "language_model"),),
)
