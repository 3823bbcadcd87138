"""Qwen3 (qwen3.py): set_eagle3 778 (+1), Qwen3Model.forward 506 (list 523; inherited from Qwen2Model before 0.5.21),
final norm 535-537.
"""

from ..releases.schema import ALWAYS_SHIFT
from .schema import Family

MODULE = "sglang.srt.models.qwen3"

FAMILY = Family(
    name="qwen3",
    architectures=("Qwen3ForCausalLM",),
    causal_lms=((MODULE, "Qwen3ForCausalLM"),),
    models=((MODULE, "Qwen3Model"),),
    stock_rule=ALWAYS_SHIFT,
)
