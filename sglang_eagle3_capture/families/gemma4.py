"""The Gemma 4 family: ``Gemma4ForCausalLM`` (SGLang's models/gemma4_causal.py), text-only checkpoints.

``set_eagle3_layers_to_capture`` (gemma4_causal.py:1495) always adds 1 and sets ``self.model.layers_to_capture``.
``Gemma4TextModel.forward`` (1024; it also takes ``per_layer_inputs``, Gemma 4's per-layer embeddings, and
``**kwargs``) captures the residual stream entering layer ``i`` into an ``AuxHiddenStateList`` (1059) through
``capture_output=`` (1072-1074): each layer writes the whole stream at its FFN exit (``layer_scalar`` applied); loop
index 0 is the scaled embedding. SGLang captures loop index N itself, pre-norm, when it is listed (1093-1094); the
plugin never lists it (its own final-norm hook takes N-1, as for every family); final norm
``residual_batch.final_norm(hidden_states, forward_batch, self.norm)`` (1096-1098). Sliding-window and full-attention
layers alternate (``layer_types``); both run the same capture.

Not in the family: ``Gemma4ForConditionalGeneration`` (gemma4_mm.py:1155) sets ``language_model.layers_to_capture``
itself and keeps the layer count in ``text_config``: refused (docs/families.md).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, Family

MODULE = "sglang.srt.models.gemma4_causal"

FAMILY = Family(
    name="gemma4",
    architectures=("Gemma4ForCausalLM",),
    causal_lms=((MODULE, "Gemma4ForCausalLM"),),
    models=((MODULE, "Gemma4TextModel"),),
    stock_rule=ALWAYS_SHIFT,
    forward_params=(*FORWARD_PARAMS[:5], "per_layer_inputs", "pp_proxy_tensors", "kwargs"),
)
