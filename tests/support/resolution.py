"""Run SGLang's own target-side resolution (``ModelRunner.init_spec_aux_hidden_state``, the plugin's resolution
seam) in this process, for a draft directory, without building a second ModelRunner."""

from __future__ import annotations

import copy
from types import SimpleNamespace


def resolve_through_sglang(runner, draft, *, algorithm: str = "EAGLE3", model_config=None, **server_args):
    """What SGLang leaves in ``spec_aux_config`` when a target runner (that of ``runner``, with ``server_args``
    overridden) resolves EAGLE-3 capture for ``draft``; patched or not, whatever is installed runs.

    ``init_spec_aux_hidden_state`` reads only ``server_args``, ``model_config``, ``spec_algorithm`` and
    ``is_draft_worker`` from its runner, so a stand-in object carries them.
    """
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    sa = copy.copy(runner.model_runner.server_args)
    sa.speculative_draft_model_path = str(draft)  # where 0.5.17/0.5.18 read it
    for key, value in server_args.items():
        setattr(sa, key, value)
    stand_in = SimpleNamespace(server_args=sa, model_config=model_config or runner.model_runner.model_config,
                               spec_algorithm=SpeculativeAlgorithm.from_string(algorithm), is_draft_worker=False)
    with get_spec().override(speculative_draft_model_path=str(draft)):
        ModelRunner.init_spec_aux_hidden_state(stand_in)
    return stand_in.spec_aux_config
