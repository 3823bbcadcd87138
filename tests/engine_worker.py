"""Run ``sglang.Engine`` once and write what it returned as JSON. Started by tests/engine_harness.py.

Usage: ``python tests/engine_worker.py SPEC.json RESULT.json``. SPEC holds ``engine_kwargs`` (passed to
``sglang.Engine``), ``prompts`` (token-id lists) and ``sampling_params``. RESULT gets ``outputs`` (one
``{"output_ids", "meta_info"}`` per prompt, in order), ``server_info`` (``Engine.get_server_info()``,
incl. ``internal_states[*].avg_spec_accept_length``), ``startup_s`` and ``generate_s``.
Expects the environment from ``sglang_cpu_patches.cpu_env()`` (the harness sets it).
"""

import json
import sys
import time


def main(spec_path: str, result_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    import sglang

    t0 = time.perf_counter()
    engine = sglang.Engine(**spec["engine_kwargs"])
    try:
        t1 = time.perf_counter()
        outputs = engine.generate(input_ids=spec["prompts"], sampling_params=spec["sampling_params"])
        t2 = time.perf_counter()
        server_info = engine.get_server_info()
    finally:
        engine.shutdown()
    result = {
        "outputs": [{"output_ids": o["output_ids"], "meta_info": o["meta_info"]} for o in outputs],
        "server_info": server_info,
        "startup_s": t1 - t0,
        "generate_s": t2 - t1,
    }
    with open(result_path, "w") as f:
        json.dump(result, f, default=repr)  # default: the odd non-JSON value in server_info


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
