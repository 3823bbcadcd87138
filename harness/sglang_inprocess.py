"""SGLang's own ``ModelRunner`` (0.5.17 ... 0.5.23) in the test process (no Engine, no subprocesses).

Modelled on ``sglang/benchmark/one_batch.py`` (``main`` -> ``correctness_test`` -> ``load_model`` ->
``extend``); the prefill itself *is* ``one_batch.extend``. Needs the CPU runtime (``harness.use_cpu_runtime()``,
which tests/conftest.py and the benchmarks call before anything imports SGLang).

API
---
``get_runner(model_dir, **server_args) -> InProcessRunner``
    Build the runner once per process and cache it. SGLang's process-wide state (``publish``, the
    gloo world of size 1) cannot be set up twice, so a later call with a *different* model_dir or
    server_args raises; the same arguments return the cached runner.
``InProcessRunner.model``
    The SGLang model object (``DeepseekV3ForCausalLM``, whose ``.model`` is ``DeepseekV2Model``, or a draft
    such as ``LlamaForCausalLMEagle3`` when ``model_dir`` is a draft directory). Patch
    methods on its classes before or after ``get_runner``: method lookups happen at call time.
    (``__init__`` patches only take effect if applied before the first ``get_runner`` in the process.)
``InProcessRunner.model_runner``
    The ``sglang.srt.model_executor.model_runner.ModelRunner``.
``InProcessRunner.prefill(prompts) -> PrefillOutput``
    One extend (prefill) batch over ``prompts`` (a list of token-id lists); KV pools are cleared first,
    so calls are independent. Returns what the model handed to its ``LogitsProcessor``.
``InProcessRunner.reset_capture()``
    Undo ``set_eagle3_layers_to_capture`` (back to the model's construction-time state; a no-op for drafts).
``sglang_layers_to_capture(ids, n_layers) -> list[int]``
    What SGLang's own ``set_eagle3_layers_to_capture`` makes of draft ids, without a runner.

Typical use::

    runner = get_runner(tiny_target_dir)
    runner.model.set_eagle3_layers_to_capture([0, 2, 4])   # stock SGLang, loop indices
    try:
        out = runner.prefill([[5, 6, 7], [8, 9]])
    finally:
        runner.reset_capture()
    out.aux            # [T, 3*H], T = 5 tokens, prompt rows in order (out.token_slices())
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from harness import ENGINE_DEFAULTS

# The Engine tests' CPU settings (one place), minus the Engine-only logging knobs, with a smaller KV pool.
DEFAULT_SERVER_ARGS = {k: v for k, v in ENGINE_DEFAULTS.items() if k not in ("log_level", "decode_log_interval")}
DEFAULT_SERVER_ARGS["max_total_tokens"] = 2048


@dataclass
class PrefillOutput:
    """What the model's forward passed to ``LogitsProcessor`` for one prefill batch (cloned)."""

    prompts: list[list[int]]
    hidden: torch.Tensor  # [T, H] final hidden states (after the final norm), T = sum(len(p))
    aux: torch.Tensor | None  # [T, K*H] packed aux hidden states, None when nothing was captured
    next_token_ids: list[int]  # greedy next token per prompt

    def token_slices(self) -> list[slice]:
        """Row range of each prompt in ``hidden`` / ``aux``."""
        out, start = [], 0
        for p in self.prompts:
            out.append(slice(start, start + len(p)))
            start += len(p)
        return out


class InProcessRunner:
    """A loaded ModelRunner plus a prefill helper. Build it through ``get_runner``."""

    def __init__(self, model_dir, **server_args):
        from sglang.benchmark import one_batch
        from sglang.srt import runtime_context
        from sglang.srt.server_args import PortArgs, ServerArgs

        self._one_batch = one_batch
        # one_batch.main: resolve the arguments (0.5.19+; before, ServerArgs resolves in __post_init__),
        # set process env/config.
        sa = ServerArgs(model_path=str(model_dir), **server_args)
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
        one_batch._set_envs_and_config(sa)
        port_args = PortArgs.init_new(sa)
        # one_batch.correctness_test: publish the process-wide config bags (0.5.21+ also takes the spawn
        # ranks; 0.5.17/0.5.18's ModelRunner publishes by itself, but only after init_spec_aux_hidden_state).
        publish = runtime_context.publish
        if "ranks" in inspect.signature(publish).parameters:
            ranks = runtime_context.SpawnRanks(
                world_rank=runtime_context.spawn_world_rank(sa, tp_rank=0, pp_rank=0), gpu_id=0)
            publish(sa, role="scheduler", ranks=ranks)
        else:
            publish(sa, role="scheduler")
        # Process-global MoE/GEMM configs (one_batch._init_process_global_configs from 0.5.22; before,
        # the same initialize_* calls as one_batch.latency_test, which take server_args up to 0.5.18).
        if hasattr(one_batch, "_init_process_global_configs"):
            one_batch._init_process_global_configs()
        else:
            for init in (one_batch.initialize_moe_config, one_batch.initialize_fp8_gemm_config,
                         one_batch.initialize_fp4_gemm_config):
                init(sa) if inspect.signature(init).parameters else init()
        # one_batch.load_model itself (parallel runtime, ModelRunner, memory pool, attention backends,
        # cuda-graph attributes), minus the tokenizer: the tiny checkpoints have none.
        get_tokenizer = one_batch.get_tokenizer
        one_batch.get_tokenizer = lambda *args, **kwargs: None
        try:
            bench_runner, _ = one_batch.load_model(sa, port_args, 0, 0)
        finally:
            one_batch.get_tokenizer = get_tokenizer
        runner = bench_runner.torch_runner
        self.model_runner = runner
        self.bench_runner = bench_runner
        self.model = runner.model
        # A target's capture configuration right after loading; a draft model (no capture loop) has none.
        # (a multimodal wrapper that delegates to its language model, e.g. Llama 4's, has no ``.model``: none either)
        loop = getattr(getattr(self.model, "model", None), "layers_to_capture", None)
        self._initial_capture = None if loop is None else (self.model.capture_aux_hidden_states, list(loop))

    def reset_capture(self) -> None:
        """Restore the capture configuration the model had right after loading (and drop any capture feed)."""
        if self._initial_capture is None:
            return
        self.model.capture_aux_hidden_states = self._initial_capture[0]
        self.model.model.layers_to_capture = list(self._initial_capture[1])
        feed = vars(self.model.model).pop("_eagle3_capture_feed", None)
        if feed is not None:
            feed.detach()  # a feed for the last layer's output hooks the final norm

    @torch.no_grad()
    def prefill(self, prompts: list[list[int]]) -> PrefillOutput:
        """Run one extend batch over ``prompts`` and return the LogitsProcessor inputs (see module doc)."""
        if not prompts or not all(prompts):
            raise ValueError(f"prefill needs non-empty prompts, got {prompts!r}")
        reqs = self._one_batch.prepare_synthetic_inputs_for_latency_test(len(prompts), None, [list(p) for p in prompts])
        self.bench_runner.clear()
        seen = {}
        # The LogitsProcessor the forward really calls: a wrapper that delegates its whole forward to a language
        # model (Llama 4's Llama4ForConditionalGeneration, mllama4.py:594-601) calls that model's.
        delegate = getattr(self.model, "language_model", None)
        logits_processor = getattr(delegate, "logits_processor", None) or self.model.logits_processor
        signature = inspect.signature(logits_processor.forward)
        original_forward = logits_processor.forward

        def spy(*args, **kwargs):  # record what the model hands to LogitsProcessor.forward
            bound = signature.bind(*args, **kwargs)
            seen["hidden"] = bound.arguments["hidden_states"].clone()
            aux = bound.arguments.get("aux_hidden_states")
            if aux is not None:
                from sglang.srt.layers.aux_hidden_states import pack_aux_hidden_states

                aux = pack_aux_hidden_states(aux).clone()
            seen["aux"] = aux
            return original_forward(*args, **kwargs)

        logits_processor.forward = spy  # instance attribute shadows the class method for this call only
        try:
            next_token_ids, _, _ = self.bench_runner.extend(reqs)
        finally:
            del logits_processor.forward
        return PrefillOutput(
            prompts=[list(p) for p in prompts],
            hidden=seen["hidden"],
            aux=seen["aux"],
            next_token_ids=next_token_ids.tolist(),
        )


def sglang_layers_to_capture(ids, n_layers: int) -> list[int]:
    """``layers_to_capture`` as SGLang 0.5.23's own ``DeepseekV2ForCausalLM.set_eagle3_layers_to_capture`` sets it for
    draft ids ``ids`` (None: absent) on an ``n_layers`` target, called on a stand-in ``self`` (no model needed)."""
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    fake = SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True),
                           config=SimpleNamespace(num_hidden_layers=n_layers),
                           model=SimpleNamespace(layers_to_capture=[]), capture_aux_hidden_states=False)
    DeepseekV2ForCausalLM.set_eagle3_layers_to_capture(fake, ids)
    return list(fake.model.layers_to_capture)


_RUNNER: tuple[tuple, InProcessRunner] | None = None


def get_runner(model_dir, **server_args) -> InProcessRunner:
    """Return this process's InProcessRunner for ``model_dir``, building it on first use."""
    global _RUNNER
    key = (str(Path(model_dir).resolve()), tuple(sorted({**DEFAULT_SERVER_ARGS, **server_args}.items())))
    if _RUNNER is None:
        _RUNNER = (key, InProcessRunner(model_dir, **{**DEFAULT_SERVER_ARGS, **server_args}))
    elif _RUNNER[0] != key:
        raise RuntimeError(
            f"an in-process SGLang runner already exists in this process for {_RUNNER[0]}; SGLang's "
            f"process-wide state allows one, so {key} cannot be built here. Reuse the same target dir and "
            "server args, or run it in a subprocess (tests/support/engine_harness.py)."
        )
    return _RUNNER[1]
