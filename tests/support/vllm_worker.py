"""Run ``vllm.LLM`` several times in one process and write what each run produced (run with the vLLM environment's
interpreter by tests/support/vllm_harness.py; never imported by the tests themselves).

Usage: ``python vllm_worker.py JOB.json OUT.json``. ``JOB.json``: ``{"runs": [RUN, ...]}``, each ``RUN``: ``{"name",
"target", "draft" (or null: no speculation), "num_speculative_tokens", "prompts" (token-id lists), "max_tokens", "env"
(set for this run: the engine core runs in this process and reads it, and vLLM spawns the model's worker process per
LLM, which inherits it), "llm_kwargs"}``. ``OUT.json``: one entry per run: ``{"name", "ok", "outputs" (token-id lists),
"metrics" (name -> value of vLLM's own counters from ``LLM.get_metrics()``), "startup_s", "generate_s", "error"}``. A
run whose LLM fails (at startup or in a batch) records the exception and the worker goes on with the next run, after
vLLM has shut that engine down.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback


def _metrics(llm) -> dict:
    out: dict = {}
    for m in llm.get_metrics():
        value = getattr(m, "value", None)
        if value is None and hasattr(m, "values"):
            value = list(m.values)
        key = m.name + "".join(f"{{{k}={v}}}" for k, v in sorted(getattr(m, "labels", {}).items())
                               if k not in ("engine", "model_name"))
        out[key] = value
    return out


def run_one(run: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    old = {k: os.environ.get(k) for k in run.get("env", {})}
    os.environ.update(run.get("env", {}))
    result = {"name": run["name"], "ok": False, "outputs": None, "metrics": {}, "error": None}
    llm = None
    try:
        kwargs = dict(model=run["target"], enforce_eager=True, dtype="float32", max_model_len=256,
                      max_num_seqs=4, seed=0, disable_log_stats=False, skip_tokenizer_init=True,
                      distributed_executor_backend="mp")  # the model in a spawned worker (vllm_harness.CPU_ENV)
        if run.get("draft"):
            kwargs["speculative_config"] = {"method": "eagle3", "model": run["draft"],
                                            "num_speculative_tokens": run.get("num_speculative_tokens", 2)}
        kwargs.update(run.get("llm_kwargs", {}))
        t0 = time.monotonic()
        llm = LLM(**kwargs)
        result["startup_s"] = round(time.monotonic() - t0, 1)
        params = SamplingParams(temperature=0.0, max_tokens=run["max_tokens"], ignore_eos=True)
        t0 = time.monotonic()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in run["prompts"]], params, use_tqdm=False)
        result["generate_s"] = round(time.monotonic() - t0, 1)
        result["outputs"] = [list(o.outputs[0].token_ids) for o in outs]
        result["metrics"] = _metrics(llm)
        result["ok"] = True
    except Exception as e:  # noqa: BLE001 - recorded for the test; the next run goes on
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()[-4000:]
    finally:
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - best effort; the processes end with their parent anyway
                pass
        del llm
        gc.collect()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return result


def main() -> int:
    job = json.loads(open(sys.argv[1]).read())
    results = []
    for run in job["runs"]:
        print(f"=== vllm_worker: run {run['name']}", flush=True)
        results.append(run_one(run))
        print(f"=== vllm_worker: done {run['name']}: ok={results[-1]['ok']} {results[-1].get('error') or ''}",
              flush=True)
        with open(sys.argv[2], "w") as f:
            json.dump({"runs": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
