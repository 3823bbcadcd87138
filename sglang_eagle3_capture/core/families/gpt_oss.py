"""GPT-OSS (gpt_oss.py): set_eagle3 1337 (ids kept as loop indices when their maximum is N, else +1),
GptOssModel.forward 688 (list 710; loop index N captured at its final norm, 726-737).
"""

from ..releases.schema import KEEP_IF_MAX_IS_N
from .schema import Family

MODULE = "sglang.srt.models.gpt_oss"

FAMILY = Family(
    name="gpt_oss",
    architectures=("GptOssForCausalLM",),
    causal_lms=((MODULE, "GptOssForCausalLM"),),
    models=((MODULE, "GptOssModel"),),
    stock_rule=KEEP_IF_MAX_IS_N,
)
