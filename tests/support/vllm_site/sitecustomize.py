"""Test-only start-up hook for vLLM's processes (never shipped): put this folder first on PYTHONPATH of
tests/support/vllm_worker.py. Every vLLM process imports it at start-up; what it does is chosen by environment
variables, read when a process starts (vLLM spawns its engine and worker processes per ``LLM``):

- ``EAGLE3_TEST_FC_SPY=DIR``: the EAGLE-3 draft's ``combine_hidden_states`` (the fc's input, ``llama_eagle3.py``)
  saves its input tensor of the first calls to ``DIR/fc_<pid>_<n>.pt``: what vLLM really feeds the fc;
- ``EAGLE3_TEST_ERRORS=DIR``: an sglang-eagle3-capture error raised while the worker loads the model or runs a batch
  is written as ``DIR/error_<pid>.json`` (its class, ``.file`` and ``.field``) before vLLM handles it, so tests
  assert on the fields and not on log wording;
- ``EAGLE3_TEST_SABOTAGE=permute``: after the plugin configured the capture, its plan's first two fc chunks are
  swapped (a mis-wired capture the first-batch self-check must refuse); ``unwire``: the plugin's capture patch is
  reverted before the model loads (a runner the plugin did not wire, which its gate must refuse);
- ``EAGLE3_TEST_FORCE_V2=1`` (set for the worker process, not per run): Model Runner V2 passes vLLM's config check on
  this CPU, which has no Triton CPU backend: V2 builds and loads the model (the gate's verification runs), and the
  first batch then fails in a Triton kernel; ``EAGLE3_TEST_SABOTAGE=v2-default``: after V2 set the captured indices
  from config.json, the model's own default is put in their place (vLLM's silent fallback, on a loaded model);
- ``EAGLE3_TEST_BREAK_PLUGIN=1``: importing the plugin's entry-point module raises, as a plugin broken in the
  server's environment would (vLLM's ``load_general_plugins`` logs it and serves on).
"""

import json
import os
import sys

SPY_CALLS = 2
PLUGIN_MODULE = "sglang_eagle3_capture.core.vllm.plugin"  # pyproject.toml's vllm.general_plugins entry point


class _BrokenPlugin:
    """A meta-path finder that fails every import of :data:`PLUGIN_MODULE`."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == PLUGIN_MODULE:
            print(f"TEST SABOTAGE: import {PLUGIN_MODULE} raises", flush=True)
            raise ImportError(f"test sabotage: {PLUGIN_MODULE} cannot be imported")
        return None


def _spy(out_dir: str) -> None:
    import torch
    from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

    original = Eagle3LlamaForCausalLM.combine_hidden_states
    calls = [0]

    def combine_hidden_states(self, hidden_states):
        if calls[0] < SPY_CALLS:
            torch.save(hidden_states.detach().clone().cpu(), os.path.join(out_dir, f"fc_{os.getpid()}_{calls[0]}.pt"))
            calls[0] += 1
        return original(self, hidden_states)

    Eagle3LlamaForCausalLM.combine_hidden_states = combine_hidden_states


def _record(out_dir: str, error: BaseException) -> None:
    from sglang_eagle3_capture.core.errors import Eagle3CaptureError

    if isinstance(error, Eagle3CaptureError) and not getattr(error, "_eagle3_test_recorded", False):
        error._eagle3_test_recorded = True  # the worker's wrapper sees the runner's error again
        with open(os.path.join(out_dir, f"error_{os.getpid()}.json"), "w") as f:
            json.dump({"type": type(error).__name__, "file": None if error.file is None else str(error.file),
                       "field": error.field, "str": str(error)}, f)


def _errors_and_sabotage(out_dir: str | None, sabotage: str | None) -> None:
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    load, execute = CPUModelRunner.load_model, GPUModelRunner.execute_model

    def load_model(self, *args, **kwargs):
        if sabotage == "unwire":  # the plugin loaded and patched, then its capture patch is gone: the gate must refuse
            from sglang_eagle3_capture.core import seams

            seams.revert(seams.Patch("vllm-capture", (), None))
            print(f"TEST SABOTAGE unwire: the vLLM capture patch reverted (pid {os.getpid()})", flush=True)
        try:
            load(self, *args, **kwargs)
        except BaseException as e:
            if out_dir:
                _record(out_dir, e)
            raise
        if sabotage == "permute":
            from dataclasses import replace

            plan = getattr(self, "_eagle3_capture_plan", None)
            if plan is not None:
                order = list(plan.chunk_order)
                order[0], order[1] = order[1], order[0]
                self._eagle3_capture_plan = replace(plan, chunk_order=tuple(order))
                print(f"TEST SABOTAGE permute: chunk order {tuple(order)} (pid {os.getpid()})", flush=True)

    def execute_model(self, *args, **kwargs):
        try:
            return execute(self, *args, **kwargs)
        except BaseException as e:
            if out_dir:
                _record(out_dir, e)
            raise

    CPUModelRunner.load_model = load_model
    GPUModelRunner.execute_model = execute_model


def _worker_errors(out_dir: str) -> None:
    """The worker's load_model (where the plugin's gate sits), looked up through the MRO at call time."""
    from vllm.v1.worker.cpu_worker import CPUWorker

    def load_model(self, *args, **kwargs):
        try:
            return super(CPUWorker, self).load_model(*args, **kwargs)
        except BaseException as e:
            _record(out_dir, e)
            raise

    CPUWorker.load_model = load_model


def _force_v2() -> None:
    """Model Runner V2 on this CPU: vLLM's config refuses it without a Triton CPU backend (``config/vllm.py:3189``,
    ``_validate_v2_model_runner``); the check is skipped, so V2's runner builds and loads the model."""
    import vllm.config.vllm as config

    config.HAS_TRITON = True
    print(f"TEST: Model Runner V2 forced without Triton (pid {os.getpid()})", flush=True)


def _v2_default() -> None:
    import vllm.v1.worker.gpu.model_runner as v2

    original = v2.set_eagle3_aux_hidden_state_layers

    def set_eagle3_aux_hidden_state_layers(model, spec_config):
        original(model, spec_config)
        model.set_aux_hidden_state_layers(model.get_eagle3_default_aux_hidden_state_layers())
        print(f"TEST SABOTAGE v2-default: the model captures its default layers (pid {os.getpid()})", flush=True)

    v2.set_eagle3_aux_hidden_state_layers = set_eagle3_aux_hidden_state_layers


def _install() -> None:
    if os.environ.get("EAGLE3_TEST_BREAK_PLUGIN") == "1":
        sys.modules.pop(PLUGIN_MODULE, None)
        sys.meta_path.insert(0, _BrokenPlugin())
    from sglang_eagle3_capture.core.after_import import when_imported
    if os.environ.get("EAGLE3_TEST_FORCE_V2") == "1":
        when_imported("vllm.config.vllm", _force_v2)
    spy = os.environ.get("EAGLE3_TEST_FC_SPY")
    if spy:
        when_imported("vllm.model_executor.models.llama_eagle3", lambda: _spy(spy))
    errors, sabotage = os.environ.get("EAGLE3_TEST_ERRORS"), os.environ.get("EAGLE3_TEST_SABOTAGE")
    if sabotage == "v2-default":
        when_imported("vllm.v1.worker.gpu.model_runner", _v2_default)
    elif errors or sabotage:
        when_imported("vllm.v1.worker.cpu_model_runner", lambda: _errors_and_sabotage(errors, sabotage))
    if errors:
        when_imported("vllm.v1.worker.cpu_worker", lambda: _worker_errors(errors))


_install()
