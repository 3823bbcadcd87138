"""Run SGLang's own target-side resolution (``ModelRunner.init_spec_aux_hidden_state``, the plugin's resolution
seam) in this process, for a draft directory, without building a second ModelRunner."""

from __future__ import annotations

from types import SimpleNamespace


class _Overridden:
    """``base`` (SGLang's ServerArgs, read-only after resolution from 0.5.17 on) with some attributes replaced."""

    def __init__(self, base, **overrides):
        self.__dict__.update(overrides, _base=base)

    def __getattr__(self, name):
        return getattr(self.__dict__["_base"], name)


def resolve_through_sglang(runner, draft, *, algorithm: str = "EAGLE3", model_config=None, **server_args):
    """What SGLang leaves in ``spec_aux_config`` when a target runner (that of ``runner``, with ``server_args``
    overridden) resolves EAGLE-3 capture for ``draft``; patched or not, whatever is installed runs.

    ``init_spec_aux_hidden_state`` reads only ``server_args``, ``model_config``, ``spec_algorithm`` and
    ``is_draft_worker`` from its runner, so a stand-in object carries them.
    """
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    # speculative_draft_model_path: where 0.5.17/0.5.18 read it (0.5.19+ read get_spec())
    sa = _Overridden(runner.model_runner.server_args, speculative_draft_model_path=str(draft), **server_args)
    stand_in = SimpleNamespace(server_args=sa, model_config=model_config or runner.model_runner.model_config,
                               spec_algorithm=SpeculativeAlgorithm.from_string(algorithm), is_draft_worker=False)
    with get_spec().override(speculative_draft_model_path=str(draft)):
        ModelRunner.init_spec_aux_hidden_state(stand_in)
    return stand_in.spec_aux_config
