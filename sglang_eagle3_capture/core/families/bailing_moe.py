"""The Bailing-MoE family: ``BailingMoEForCausalLM`` (SGLang's models/bailing_moe.py; inclusionAI's Ling models) and
the classes that inherit it: ``BailingMoeForCausalLM``, ``BailingMoeV2ForCausalLM`` (1112-1117) and
``SarvamMoEForCausalLM`` (sarvam_moe.py:1407).

``set_eagle3_layers_to_capture`` (bailing_moe.py:1098) always adds 1 and sets ``self.model.layers_to_capture``; it
returns early off the last pipeline rank (1099-1100). ``BailingMoEModel.forward`` (808) hands each layer both
``captured_last_layer_outputs=`` (the gathered path, when the layer's ``_is_layer_to_capture`` flag is set, which no
SGLang code sets for this model) and ``capture_output=`` (the residual entering layer ``i``, when ``i in
layers_to_capture``) into one ``AuxHiddenStateList`` (826-841); the plugin uses the list, like stock. Loop index 0 is
the embedding in every release (0.5.17-0.5.20 append ``hidden_states`` when ``residual is None``); loop index N is
dropped silently; final norm ``residual_batch.final_norm(hidden_states, forward_batch, self.norm)`` unless the batch
is idle (846-849). The embedding is ``word_embeddings`` (777), not ``embed_tokens``; a decoder layer's attention
is ``attention`` (661).
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.bailing_moe"

FAMILY = Family(
    name="bailing_moe",
    architectures=("BailingMoEForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
                   "SarvamMoEForCausalLM"),
    causal_lms=((MODULE, "BailingMoEForCausalLM"),),
    models=((MODULE, "BailingMoEModel"),),
    stock_rule=ALWAYS_SHIFT,
    embed_tokens="word_embeddings",
    attn="attention",
)
