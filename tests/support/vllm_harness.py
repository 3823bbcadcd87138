"""Run ``vllm.LLM`` on CPU in a subprocess of the vLLM environment (tests/support/vllm_worker.py) and return its runs.

The vLLM tests run under the SGLang environment's pytest (HF references, fixtures, the package's own readers there);
vLLM lives in an environment of its own (``make setup-vllm``: ``tools/install_vllm.py``), whose interpreter
``SGLANG_EAGLE3_CAPTURE_VLLM_PYTHON`` names (the Makefile sets it). Without it the tests fail naming the command: a
skip would prove nothing.

``run_vllm(runs, *, plugins, env=None, timeout=1200) -> list[dict]``: ``runs`` from :func:`vllm_run`, one after another
in one worker process (each ``LLM`` spawns its model worker process anew, so a run's ``env`` reaches it; the engine core
runs in the worker script's process, :data:`CPU_ENV`; the script's import of vLLM is paid once). ``plugins``: the
``VLLM_PLUGINS`` allowlist (``PLUGIN``, or ``NO_PLUGINS``, a name matching no plugin); ``None`` leaves it unset (every
installed plugin loads). Each result: ``ok``, ``outputs`` (token ids per prompt), ``metrics`` (vLLM's own,
``LLM.get_metrics()``), ``error``, ``startup_s``, and ``spy``: the fc inputs the draft received (``EAGLE3_TEST_FC_SPY``,
in call order) and ``errors``: this package's errors raised in vLLM's worker (``{"type", "file", "field"}``), both read
from the run's own folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from support import REPO

ENV = "SGLANG_EAGLE3_CAPTURE_VLLM_PYTHON"
WORKER = Path(__file__).resolve().parent / "vllm_worker.py"
SITE = Path(__file__).resolve().parent / "vllm_site"
PLUGIN = "eagle3_capture"  # pyproject.toml's vllm.general_plugins entry point name
NO_PLUGINS = "__no_vllm_plugins__"
MARK = "=== vllm_worker: run "  # the worker prints it before each run
# vLLM on CPU: the KV cache in GiB (else it wants 0.92 of the node, v1/worker/cpu_worker.py:87), its messaging on
# loopback (else the machine's address, v1/executor/multiproc_executor.py:152). The engine core runs in the worker
# script's own process (InprocClient, v1/engine/llm_engine.py:170): one process start and one `import vllm` (about
# 20 s on a 2-core machine) less per LLM. The model still runs in a worker process that the executor spawns
# (vllm_worker.py asks for the "mp" backend, which vLLM's CPU platform would choose itself with the engine core in a
# process of its own, platforms/cpu.py:334-341): the plugin patches the model runner there, as in a deployment.
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def vllm_python() -> str:
    """The vLLM environment's interpreter, or the test fails naming ``make setup-vllm``."""
    python = os.environ.get(ENV)
    if not python or not Path(python).is_file():
        pytest.fail(f"no vLLM environment: {ENV} is {python!r}; build it with `make setup-vllm` (make test sets it)")
    return python


def vllm_run(name: str, target, draft, *, prompts: list[list[int]], max_tokens: int = 8,
             num_speculative_tokens: int = 2, env: dict | None = None, spy: bool = True,
             llm_kwargs: dict | None = None) -> dict:
    """One ``LLM`` run of :func:`run_vllm`; ``spy`` records the draft's fc inputs and this package's errors;
    ``llm_kwargs`` override the worker's ``LLM`` arguments (fp32, eager, 256 tokens)."""
    return {"name": name, "target": str(target), "draft": None if draft is None else str(draft), "prompts": prompts,
            "max_tokens": max_tokens, "num_speculative_tokens": num_speculative_tokens, "env": dict(env or {}),
            "spy": spy, "llm_kwargs": dict(llm_kwargs or {})}


def run_vllm(runs: list[dict], *, plugins: str | None, env: dict | None = None, timeout: int = 1200) -> list[dict]:
    """Run ``runs`` in one vLLM worker process; results in run order (module doc)."""
    import torch

    python = vllm_python()
    with tempfile.TemporaryDirectory(prefix="vllm-runs-") as tmp:
        tmp = Path(tmp)
        for i, run in enumerate(runs):
            folder = tmp / f"run{i}"
            folder.mkdir()
            if run.pop("spy", True):
                run["env"].update(EAGLE3_TEST_FC_SPY=str(folder), EAGLE3_TEST_ERRORS=str(folder))
        (tmp / "job.json").write_text(json.dumps({"runs": runs}))
        child = {**os.environ, **CPU_ENV, **(env or {})}
        child["PYTHONPATH"] = os.pathsep.join([str(SITE), str(REPO)])  # the site first: vLLM's processes import it
        if plugins is None:
            child.pop("VLLM_PLUGINS", None)
        else:
            child["VLLM_PLUGINS"] = plugins
        proc = subprocess.run(["nice", "-n", "10", python, str(WORKER), str(tmp / "job.json"), str(tmp / "out.json")],
                              env=child, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if not (tmp / "out.json").exists():
            raise RuntimeError(f"the vLLM worker wrote no result (exit {proc.returncode}):\n{proc.stdout[-6000:]}")
        results = json.loads((tmp / "out.json").read_text())["runs"]
        logs = proc.stdout.split(MARK)[1:]  # one part per run, in run order
        for i, result in enumerate(results):
            folder = tmp / f"run{i}"
            spies = sorted(folder.glob("fc_*.pt"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))
            result["spy"] = [torch.load(p) for p in spies]
            result["errors"] = [json.loads(p.read_text()) for p in folder.glob("error_*.json")]
            result["log"] = logs[i] if i < len(logs) else ""
        return results


# --------------------------------------------------------------------------------------------- the tests' drafts

FAMILIES = ("llama", "qwen3")  # Llama and a second family (DeepSeek-V3's MLA does not run on vLLM's CPU build)
NUM_LAYERS = 7  # so that vLLM's default (2, N//2, N-3) = HF[2, 3, 4] differs from every manifest below
PROMPT = [1, 2, 3, 4, 5, 6]
MANIFESTS = {"ascending": [-1, 1, 4], "final-norm": [-1, 1, "final_norm"], "not-ascending": [4, -1, 1],
             "mixed": [4, -1, "final_norm"]}  # mixed: the embedding, a layer, the post-norm state, out of order


def build_cases(root: Path, cases) -> tuple[dict, dict]:
    """``(targets, drafts)``: a tiny target per family the ``(family, manifest name)`` pairs of ``cases`` name
    (transformers' own class, a head size vLLM's CPU attention takes) and, per pair, a random EAGLE-3 draft given
    that manifest of :data:`MANIFESTS` by ``manifest write --fail-closed`` (its config.json then carries what stock
    SGLang and stock vLLM must read); ``drafts[(family, case)]``."""
    from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
    from support.tiny_models import VLLM_DIMS, build_family_target, build_tiny_draft

    cases = list(dict.fromkeys(cases))
    targets = {f: build_family_target(f, root / f, num_hidden_layers=NUM_LAYERS, dims=VLLM_DIMS)
               for f in dict.fromkeys(f for f, _ in cases)}
    drafts = {}
    for seed, (family, case) in enumerate(cases):
        ids = MANIFESTS[case]
        draft = build_tiny_draft(root / f"{family}-{case}", target_dir=targets[family], num_aux=len(ids), seed=seed)
        write_draft_manifest(draft, ids, targets[family], fail_closed=True)
        drafts[(family, case)] = draft
    return targets, drafts


def hf_state(hf, layer_id, num_layers: int):
    """HF's hidden state a layer id names for :data:`PROMPT` (``[T, H]``): ``hidden_states[id + 1]``, the final norm's
    input for ``N-1``, ``hidden_states[N]`` (after the norm) for ``"final_norm"``."""
    from support.hf_reference import hf_hidden_states, hf_layer_outputs

    if layer_id == "final_norm":
        return hf_hidden_states(hf, PROMPT)[num_layers]
    return hf_layer_outputs(hf, PROMPT)[layer_id + 1]
