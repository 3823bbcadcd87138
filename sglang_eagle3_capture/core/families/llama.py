"""Llama and the classes reusing its loop (llama.py; mistral.py:33, ministral3.py:162, teleflm.py:81): set_eagle3
llama.py:929 (+1), LlamaModel.forward 465 (list 485), TeleFLMModel.forward teleflm.py:59, final norm 498-500.
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
