"""Run ``sglang.Engine`` for one or more runs, one after another, and write what each did as JSON.

Started by tests/support/engine_harness.py: ``python tests/support/engine_worker.py SPEC.json RESULT.json LOGDIR``.
SPEC is ``{"runs": [{"engine_kwargs", "prompts", "sampling_params", "env"?, "image_data"?}, ...]}``: for each run
an Engine is built with ``engine_kwargs`` (``env`` added to this process's environment while it runs, so the
engine's spawned processes start with it), generates for ``prompts`` (token-id lists; ``image_data``: per prompt, a
list of image files) and is shut down, so several runs share this process's ``import sglang``. Each run's output,
the engine's own processes' included, goes to ``LOGDIR/run-<i>.log`` (file descriptors 1 and 2 point there while
it runs; spawned processes inherit them).

A run whose Engine fails to start does not end the others: SGLang's child processes signal a failure to the
launcher with SIGQUIT (engine.py's launch-phase handler kills the whole process tree); ``custom_sigquit_handler``,
SGLang's own hook for that signal (0.5.17 ... 0.5.23), turns it into an exception here instead, the failed engine's
processes are killed, and the run's result is ``{"failed": "start", "error": traceback}``. Once serving, the tokenizer
manager's own SIGQUIT handler (installed on the event loop at the first request) kills the whole tree, this process
included: the harness reads that as the last run's failure while serving.
RESULT is a list with, per run: ``outputs`` (one ``{"output_ids", "meta_info"}`` per prompt), ``server_info``
(``Engine.get_server_info()``), ``startup_s`` and ``generate_s``; or ``failed`` and ``error``.
Expects the environment from ``sglang_cpu_patches.cpu_env()`` (the harness sets it).
"""

import json
import os
import signal
import sys
import time
import traceback


class StartupFailed(RuntimeError):
    """A child process of the Engine being started signalled that it failed (SIGQUIT)."""


def _sigquit(signum, frame):
    raise StartupFailed("a child process of the Engine signalled a failed start (SIGQUIT)")


def _clean_up_failed_start() -> None:
    """Kill the failed engine's processes and close its ZeroMQ contexts (their sockets stay open with unsent
    messages: the next garbage collection would otherwise block in ``Context.term``)."""
    import gc

    import psutil
    import zmq

    children = psutil.Process().children(recursive=True)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=60)
    for obj in gc.get_objects():
        if isinstance(obj, zmq.Context) and not obj.closed:
            obj.destroy(linger=0)


def _failed(phase: str, e: BaseException, t0: float) -> dict:
    if isinstance(e, KeyboardInterrupt):
        raise e
    time.sleep(1)  # the failing child has logged its traceback before it signalled; let the others finish a line
    _clean_up_failed_start()
    return {"failed": phase, "error": "".join(traceback.format_exception(e)), "startup_s": time.perf_counter() - t0}


def run_one(engine_kwargs: dict, prompts: list, sampling_params: dict, env: dict | None = None,
            image_data: list | None = None) -> dict:
    """One Engine: built, used, shut down. A failure to start or to serve (a child's SIGQUIT, or an exception here)
    is the run's result, ``{"failed": "start" | "serve", "error": traceback}``."""
    import sglang

    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})  # the engine's processes (spawned) start with it; put back after this run
    t0 = time.perf_counter()
    try:
        try:
            engine = sglang.Engine(**engine_kwargs, custom_sigquit_handler=_sigquit)
        except BaseException as e:  # noqa: BLE001 - a failed start is this run's result, not the worker's end
            return _failed("start", e, t0)
        t1 = time.perf_counter()
        try:
            extra = {} if image_data is None else {"image_data": image_data}
            outputs = engine.generate(input_ids=prompts, sampling_params=sampling_params, **extra)
            t2 = time.perf_counter()
            server_info = engine.get_server_info()
        except BaseException as e:  # noqa: BLE001 - the engine's processes are gone or failing: no shutdown
            return _failed("serve", e, t0)
        engine.shutdown()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {
        "outputs": [{"output_ids": o["output_ids"], "meta_info": o["meta_info"]} for o in outputs],
        "server_info": server_info,
        "startup_s": t1 - t0,
        "generate_s": t2 - t1,
    }


def _logged(i: int, log_dir: str, run: dict) -> dict:
    """``run_one`` with file descriptors 1 and 2 on ``LOGDIR/run-<i>.log`` (the engine's children inherit them)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(os.path.join(log_dir, f"run-{i}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        return run_one(**run)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def main(spec_path: str, result_path: str, log_dir: str) -> None:
    with open(spec_path) as f:
        runs = json.load(f)["runs"]
    signal.signal(signal.SIGQUIT, _sigquit)  # also between Engine starts (a late child failure)
    results = []
    for i, run in enumerate(runs):
        results.append(_logged(i, log_dir, run))
        with open(result_path, "w") as f:  # written after every run: what ran is kept if a later run kills us
            json.dump(results, f, default=repr)  # default: the odd non-JSON value in server_info


if __name__ == "__main__":  # required: SGLang's spawned processes re-import the main module
    main(*sys.argv[1:4])
