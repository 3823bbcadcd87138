"""The LongCat-Flash family: ``LongcatFlashForCausalLM`` (SGLang's models/longcat_flash.py; Meituan's LongCat-Flash).

A decoder layer (``LongcatFlashDecoderLayer``, 350) holds two attention and two MLP sublayers and a shortcut MoE:
attention 0, then the MoE branch and MLP 0 both read the post-attention-0 norm, attention 1, MLP 1, and the MoE
output joins the stream at the layer's end (``merge_branch``, 496-501). ``num_hidden_layers`` of SGLang's config is
the number of these layers (configs/longcat_flash.py:81-83: ``num_layers`` when absent, as in the
config transformers writes: the family's ``layer_count_keys``), and a layer id names the output of
one of them: the residual stream after the MoE branch joined, which is what HF records as ``hidden_states[k+1]``
(transformers' ``LongcatFlashDecoderLayer`` returns ``residual + mlps[1] output + shortcut MoE output``; its config's
``num_hidden_layers`` property is ``2 * num_layers``, the attention sublayer count, not the decoder layer count).

``set_eagle3_layers_to_capture`` (1112) always adds 1; it has no pipeline check and the causal LM no ``pp_group``
(the model has no pipeline parallelism): the plugin reads the runtime's pipeline group, a group of one.
``LongcatFlashModel.forward`` (593; parameters ``input_ids, positions, forward_batch, input_embeds``, no
``pp_proxy_tensors``) appends ``residual_batch.snapshot(hidden_states, forward_batch)`` to a plain list before layer
``i`` when ``i in layers_to_capture`` (619-623). Loop index 0 is the embedding from 0.5.21 (0.5.17-0.5.20 append
``hidden_states + residual`` with residual None: a TypeError); loop index N is dropped silently; final norm
``final_norm(..., skip_empty=True)`` (634-636). A layer's norms and attentions are ``nn.ModuleList`` pairs: the one
that reads the residual stream entering the layer is ``input_layernorm[0]`` before ``self_attn[0]``.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import FORWARD_PARAMS, PP_FROM_RUNTIME, Family

MODULE = "sglang.srt.models.longcat_flash"

FAMILY = Family(
    name="longcat_flash",
    architectures=("LongcatFlashForCausalLM",),
    causal_lms=((MODULE, "LongcatFlashForCausalLM"),),
    models=((MODULE, "LongcatFlashModel"),),
    stock_rule=ALWAYS_SHIFT,
    forward_params=FORWARD_PARAMS[:5],
    pp_group=PP_FROM_RUNTIME,
    layer_count_keys=("num_hidden_layers", "num_layers"),  # configs/longcat_flash.py:81-83
    input_norm="input_layernorm.0",
    attn="self_attn.0",
)
