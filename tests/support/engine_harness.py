"""Run ``sglang.Engine`` on CPU in a fresh subprocess (tests/support/engine_worker.py) and return its outputs.

API
---
``run_engine(model_path, prompts, *, draft_path=None, sampling_params=None, engine_kwargs=None,
             plugins=NO_PLUGINS, env=None, timeout=600) -> dict``
    ``prompts``: token-id lists. ``draft_path``: adds ``eagle3_kwargs(draft_path)`` (EAGLE-3, chain
    case). ``engine_kwargs`` override ``ENGINE_DEFAULTS``. ``sampling_params`` defaults to
    ``greedy(8)``. ``plugins``: the ``SGLANG_PLUGINS`` value for the engine's processes: ``NO_PLUGINS``
    (default) loads no ``sglang.srt.plugins`` entry point, a comma-separated list loads exactly those,
    ``None`` leaves the variable as inherited (unset = every installed plugin). ``env``: extra
    environment variables. Returns the worker's JSON: ``outputs[i]["output_ids"]``,
    ``outputs[i]["meta_info"]`` (``completion_tokens``, ``spec_verify_ct``, ``spec_accept_length``, ...),
    ``server_info`` (``internal_states[0]["avg_spec_accept_length"]``), ``startup_s``, ``generate_s``.
    Raises ``EngineRunError`` (with the subprocess's stderr tail) on failure or timeout.
``run_engines([engine_run(...), ...], *, plugins=NO_PLUGINS, env=None, timeout=900) -> list[dict]``
    Several runs (e.g. plain + EAGLE-3) one after another in one subprocess: saves one
    ``import sglang`` (~15 s) per extra run. ``engine_run`` takes ``run_engine``'s per-run arguments, and ``env``
    for that run alone (the engine's processes are spawned, so they start with it; e.g. ``SGLANG_PLUGINS`` per run:
    SGLang's main process loads plugins once, at the first Engine, so put a run without the plugin first).

SGLANG_PLUGINS in 0.5.23 (``sglang/srt/plugins/__init__.py::load_plugins_by_group``): an empty or unset
value means no filter; otherwise a comma-separated whitelist of entry-point *names* (not dist names),
whitespace-stripped. There is no way to say "none" except a name that matches nothing, hence
``NO_PLUGINS``. A plugin whose ``ep.load()`` or ``register()`` raises is logged
(``logger.exception``) and skipped; the process goes on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ENGINE_DEFAULTS, REPO  # the CPU settings, shared with the benchmarks

WORKER = Path(__file__).resolve().parent / "engine_worker.py"
NO_PLUGINS = "__no_sglang_plugins__"  # matches no entry-point name


class EngineRunError(RuntimeError):
    """The engine subprocess failed or timed out; the message ends with its stderr tail."""


def greedy(max_new_tokens: int = 8) -> dict:
    """Greedy sampling params that ignore EOS, so every prompt yields exactly max_new_tokens tokens."""
    return {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True}


def eagle3_kwargs(draft_path) -> dict:
    """Engine kwargs for EAGLE-3 as a 1-step chain (topk 1, 2 draft tokens), the cheapest setting; the CPU runtime also
    runs multi-step chains and trees (cpu_runtime B7/B8, tests/engine/test_cpu_multistep.py)."""
    return dict(
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft_path),
        speculative_num_steps=1,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=2,
    )


def run_engine(model_path, prompts, *, draft_path=None, sampling_params=None, engine_kwargs=None,
               plugins=NO_PLUGINS, env=None, timeout=600, keep_log=None, fails=None) -> dict:
    """Start sglang.Engine in a subprocess, generate for ``prompts``, return the parsed result (see module doc)."""
    run = engine_run(model_path, prompts, draft_path=draft_path, sampling_params=sampling_params,
                     engine_kwargs=engine_kwargs, fails=fails)
    return run_engines([run], plugins=plugins, env=env, timeout=timeout, keep_log=keep_log)[0]


def engine_run(model_path, prompts, *, draft_path=None, sampling_params=None, engine_kwargs=None, env=None,
               image_data=None, fails=None) -> dict:
    """Describe one Engine run for ``run_engines`` (same meaning as ``run_engine``'s arguments; ``env``: variables
    set for this run only, on top of ``run_engines``' own: e.g. ``{"SGLANG_PLUGINS": NO_PLUGINS}`` for one run of a
    subprocess that loads the plugin for the others; ``image_data``: per prompt, a list of image file paths, handed to
    ``Engine.generate`` beside the token ids; ``fails``: ``"start"`` if the Engine must fail at startup (the runs
    after it go on in the same subprocess), ``"serve"`` if it must start and then fail serving the prompts (SGLang
    then kills the launcher's process tree: such a run must come last); its result is then
    ``{"failed", "error", "log"}``)."""
    kwargs = {**ENGINE_DEFAULTS, "model_path": str(model_path)}
    if draft_path is not None:
        kwargs.update(eagle3_kwargs(draft_path))
    kwargs.update(engine_kwargs or {})
    run = {"engine_kwargs": kwargs, "prompts": [list(p) for p in prompts],
           "sampling_params": sampling_params or greedy(), "env": dict(env or {}), "fails": fails}
    if image_data is not None:
        run["image_data"] = [[str(f) for f in files] for files in image_data]
    return run


def run_engines(runs: list[dict], *, plugins=NO_PLUGINS, env=None, timeout=900, keep_log=None) -> list[dict]:
    """Run several ``engine_run(...)`` descriptions one after another in ONE subprocess (one
    ``import sglang`` for all); returns one result per run, as ``run_engine`` does, each with its own output as
    ``"log"`` (the engine's processes' log lines). ``keep_log``: where to keep every run's output, in order,
    whatever happened. Raises ``EngineRunError`` if a run fails where it should start, or starts where it should
    fail."""
    from support import subprocess_env

    child_env = subprocess_env()  # cpu_runtime first, then this checkout (not whichever one the venv installed)
    if plugins is not None:
        child_env["SGLANG_PLUGINS"] = plugins
    child_env.update(env or {})
    # a caller's PYTHONPATH (a start-up hook put first) still ends with this checkout's package, which an editable
    # install pointing at another checkout would otherwise shadow in the subprocess (its sys.path[0] is tests/support)
    if str(REPO) not in child_env["PYTHONPATH"].split(os.pathsep):
        child_env["PYTHONPATH"] = os.pathsep.join([child_env["PYTHONPATH"], str(REPO)])
    with tempfile.TemporaryDirectory(prefix="engine_run_") as tmp:
        spec_path, result_path, log_path = (Path(tmp) / n for n in ("spec.json", "result.json", "worker.log"))
        spec_path.write_text(json.dumps({"runs": [{k: v for k, v in r.items() if k != "fails"}
                                                  for r in runs]}))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, str(WORKER), str(spec_path), str(result_path), tmp],
                                    env=child_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            start = time.monotonic()
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                _kill_group(proc)  # the engine's scheduler/detokenizer children, whatever happened
        logs = [(Path(tmp) / f"run-{i}.log") for i in range(len(runs))]
        texts = [p.read_text(errors="replace") if p.exists() else "" for p in logs]
        worker_text = log_path.read_text(errors="replace")
        if keep_log is not None:
            Path(keep_log).write_text("".join(texts) + worker_text)
        results = json.loads(result_path.read_text()) if result_path.exists() else []
        engines = [r["engine_kwargs"] for r in runs]
        if rc not in (0, None) and len(results) == len(runs) - 1 and runs[-1]["fails"] == "serve":
            # SGLang's running-phase SIGQUIT handler (tokenizer_manager.py, installed on the first request) kills
            # the launcher's whole process tree: a run that must fail while serving ends the worker, hence last.
            results.append({"failed": "serve", "error": f"the worker was killed ({rc}) when the engine failed"})
            rc = 0
        if rc != 0 or len(results) != len(runs):
            what = (f"timed out after {timeout} s" if rc is None
                    else f"exited with {rc} after {time.monotonic() - start:.0f} s")
            tail = (texts[len(results)] if len(results) < len(runs) else "")[-6000:] + worker_text[-3000:]
            raise EngineRunError(f"sglang.Engine subprocess {what} in run {len(results)}; engine kwargs "
                                 f"{engines[len(results):len(results) + 1]}\n--- output tail ---\n{tail}")
        for i, (run, result, text) in enumerate(zip(runs, results, texts)):
            result["log"] = text
            if result.get("failed") != run["fails"]:
                what = (f"failed ({result['failed']})" if "failed" in result
                        else f"did not fail ({run['fails']} expected)")
                raise EngineRunError(f"sglang.Engine run {i} {what}; engine kwargs {engines[i]}\n"
                                     f"--- output tail ---\n{text[-6000:]}{result.get('error', '')[-3000:]}")
        return results


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
