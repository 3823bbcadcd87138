"""SGLang 0.5.18 (wheel built 2026-08-21): as 0.5.19 (read from the wheel), but the resolved draft path is
``server_args.speculative_draft_model_path`` (spec_aux_hidden_state.py l.62/67); ``get_spec()`` holds it
only from 0.5.19; ``PrefillCudaGraphRunner.can_replay_locally`` ends with ``chunked_prefix_uncapturable``."""

from dataclasses import replace

from . import sglang_0_5_19
from .sglang_0_5_23 import eager_prefill

RELEASE = replace(sglang_0_5_19.RELEASE, version="0.5.18", built="2026-08-21", draft_path_from="server_args",
                  resolution_record=False,  # speculative_hook.py l.683: assigns server_args fields in place
                  # qwen3_vl.py l.1164-1181 (0.5.17 the same lines): the loop appends hidden_states + residual, then
                  # layer k+1 adds deepstack[k] through post_residual_addition: the capture precedes the add
                  deepstack_before_add=("qwen3_vl",),
                  seams=sglang_0_5_19.RELEASE.with_seams(eager_prefill("chunked_prefix_uncapturable")))
