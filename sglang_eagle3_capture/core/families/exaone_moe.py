"""The EXAONE MoE family: ``ExaoneMoEForCausalLM`` and its empty subclass ``ExaoneMoeForCausalLM`` (SGLang's
models/exaone_moe.py; K-EXAONE).

``ExaoneMoEForCausalLM.set_eagle3_layers_to_capture`` (exaone_moe.py:866) always adds 1, sets
``self.model.layers_to_capture`` and returns early off the last pipeline rank, which it reads from
``get_parallel().pp_group`` (867; ``get_pp_group()`` through 0.5.20). ``ExaoneMoEModel.forward`` (579) captures the
residual stream entering layer ``i`` into an ``AuxHiddenStateList`` (599) through ``capture_output=`` (606-608);
loop index 0 is the embedding from 0.5.22 (0.5.17-0.5.21 append ``hidden_states + residual`` with no residual at
index 0, exaone_moe.py:588 in 0.5.21: a TypeError); the loop ends at N-1, so loop index N is dropped silently; the
final norm is ``residual_batch.final_norm(hidden_states, forward_batch, self.norm, skip_empty=True)`` (612-614).
Sliding-window layers (RoPE) and global layers (NoPE) alternate per ``layer_types`` (369-372); which layers are MoE
comes from ``config.is_moe_layer`` (497), a key EXAONE's own configs carry and transformers does not write. The
subclass ``ExaoneMoeForCausalLM`` exists from 0.5.22.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import PP_FROM_RUNTIME, Family

MODULE = "sglang.srt.models.exaone_moe"

FAMILY = Family(
    name="exaone_moe",
    architectures=("ExaoneMoEForCausalLM", "ExaoneMoeForCausalLM"),
    causal_lms=((MODULE, "ExaoneMoEForCausalLM"),),
    models=((MODULE, "ExaoneMoEModel"),),
    stock_rule=ALWAYS_SHIFT,
    pp_group=PP_FROM_RUNTIME,
)
