"""The Llama 4 family: ``Llama4ForConditionalGeneration`` (SGLang's models/mllama4.py), the class SGLang serves every
Llama 4 checkpoint with (text-only ones included, mllama4.py:459-466), and its language model ``Llama4ForCausalLM``
(llama4.py).

``Llama4ForCausalLM`` (llama4.py:546) inherits ``LlamaForCausalLM.set_eagle3_layers_to_capture`` (llama.py:929,
always +1, ``self.model.layers_to_capture``) but builds its own ``Llama4Model`` (477, ``_init_model`` 591-597), so
this family patches the method on ``Llama4ForCausalLM`` itself (wrapping SGLang's own, inherited function) and
``Llama4Model.forward`` (509). The loop is the Llama loop's shape: decoder layer ``i`` copies the residual stream
entering it into an ``AuxHiddenStateList`` (522) through ``capture_output=`` (529-531, ``attn_boundary.prepare``);
loop index 0 is the embedding; the loop ends at N-1, so loop index N is dropped silently; the final norm is
``residual_batch.final_norm(hidden_states, forward_batch, self.norm)`` unless the batch is idle (535-538). What
differs from Llama is inside the layers, not the capture: chunked attention on RoPE layers and global NoPE
attention with temperature tuning every fourth layer (``use_rope``, 218; ``_mul_attn_scale``, 317-320 and
365-366), and MoE layers (a sigmoid-routed top-k plus a shared expert) every ``interleave_moe_layer_step``-th layer
(438-441).
0.5.17-0.5.20 append ``hidden_states + residual`` with no residual at loop index 0 (llama4.py:539 in 0.5.20).

``Llama4ForConditionalGeneration.set_eagle3_layers_to_capture`` (mllama4.py:971-973) hands the ids to its
``language_model`` (a ``Llama4ForCausalLM``, 496-500), whose configuration is the checkpoint's ``text_config``.

Not in the family: the architecture ``Llama4ForCausalLM`` on its own. SGLang builds it, but loads it with
``LlamaForCausalLM.load_weights`` (llama.py), which knows no routed-expert weights ("Parameter
model.layers.1.feed_forward.experts.gate_up_proj not found in params_dict") and does not permute q/k for Llama 4's
interleaved RoPE pairs as the wrapper's loader does (mllama4.py:606-636): the model SGLang runs is not the checkpoint's
(docs/families.md), whatever the capture.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.llama4"

FAMILY = Family(
    name="llama4",
    architectures=("Llama4ForConditionalGeneration",),
    causal_lms=((MODULE, "Llama4ForCausalLM"),),
    models=((MODULE, "Llama4Model"),),
    stock_rule=ALWAYS_SHIFT,
    text_config=("Llama4ForConditionalGeneration",),
)
