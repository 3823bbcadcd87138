"""Run ``sglang.Engine`` for one or more runs, one after another, and write what it returned as JSON.

Started by tests/support/engine_harness.py: ``python tests/support/engine_worker.py SPEC.json RESULT.json``. SPEC is
``{"runs": [{"engine_kwargs", "prompts", "sampling_params", "env"?, "image_data"?}, ...]}``: for each run an Engine
is built with ``engine_kwargs`` (and ``env`` added to this process's environment while it runs, so the engine's spawned
processes start with it), generates for ``prompts`` (token-id lists; ``image_data``: per prompt, a list of image
files) and is shut down, so several runs share
this process's ``import sglang``. RESULT is a list with, per run: ``outputs`` (one
``{"output_ids", "meta_info"}`` per prompt, in order), ``server_info`` (``Engine.get_server_info()``, incl.
``internal_states[*].avg_spec_accept_length``), ``startup_s`` and ``generate_s``.
Expects the environment from ``sglang_cpu_patches.cpu_env()`` (the harness sets it).
"""

import json
import os
import sys
import time


def run_one(engine_kwargs: dict, prompts: list, sampling_params: dict, env: dict | None = None,
            image_data: list | None = None) -> dict:
    import sglang

    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})  # the engine's processes (spawned) start with it; put back after this run
    t0 = time.perf_counter()
    try:
        engine = sglang.Engine(**engine_kwargs)
        try:
            t1 = time.perf_counter()
            extra = {} if image_data is None else {"image_data": image_data}
            outputs = engine.generate(input_ids=prompts, sampling_params=sampling_params, **extra)
            t2 = time.perf_counter()
            server_info = engine.get_server_info()
        finally:
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


def main(spec_path: str, result_path: str) -> None:
    with open(spec_path) as f:
        runs = json.load(f)["runs"]
    results = [run_one(**run) for run in runs]
    with open(result_path, "w") as f:
        json.dump(results, f, default=repr)  # default: the odd non-JSON value in server_info


if __name__ == "__main__":  # required: SGLang's spawned processes re-import the main module
    main(sys.argv[1], sys.argv[2])
