"""Model Runner V2 (vLLM 0.33's default runner, 0.34's only one) through real vLLM 0.32's V2 on CPU: the plugin does not
patch it, and its gate (``wiring.verify_v2``) serves a draft with a manifest only when V2's own capture of the loaded
model is the manifest's, and refuses it at startup otherwise.

This CPU build has no Triton CPU backend, which V2 needs (``config/vllm.py:3189``): tests/support/vllm_site lets V2
past that config check (``EAGLE3_TEST_FORCE_V2``), so V2 builds the runner, loads the target and the drafter and sets
the captured indices with vLLM's own code, and the gate runs on that; the first batch then fails in a Triton kernel,
so no token and no fc input is read here (the V1 runner's tests read those). One worker process, five starts: stock V2
refusing the fail-closed value first (the front end must never have loaded the plugin), then the plugin's
acceptance of ``[-1, 1, 4]`` and its three refusals (the final norm's output, an order V2 would sort, and the accepted
draft again with the model's default captured after V2 read config.json: the check reads the loaded model, not the
file).
"""

from __future__ import annotations

import pytest

from support.vllm_harness import NO_PLUGINS, PROMPT, build_cases, run_vllm, vllm_run

V2 = {"VLLM_USE_V2_MODEL_RUNNER": "1"}
CASES = [("llama", "ascending"), ("llama", "final-norm"), ("llama", "not-ascending")]


@pytest.fixture(scope="module")
def v2(tmp_path_factory):
    targets, drafts = build_cases(tmp_path_factory.mktemp("vllm-v2"), CASES)
    runs = [vllm_run("stock/final-norm", targets["llama"], drafts[("llama", "final-norm")], prompts=[PROMPT],
                     env={**V2, "VLLM_PLUGINS": NO_PLUGINS})]
    runs += [vllm_run(f"plugin/{c}", targets[f], drafts[(f, c)], prompts=[PROMPT], env=V2) for f, c in CASES]
    runs.append(vllm_run("plugin/default-captured", targets["llama"], drafts[("llama", "ascending")],
                         prompts=[PROMPT], env={**V2, "EAGLE3_TEST_SABOTAGE": "v2-default"}))
    out = run_vllm(runs, plugins=None, env={"EAGLE3_TEST_FORCE_V2": "1"})
    return drafts, {r["name"]: r for r in out}


def _started(r: dict) -> bool:
    return r.get("startup_s") is not None  # LLM() returned: the engine, the runner and the gate came up


def test_a_manifest_v2_captures_exactly_is_served(v2):
    _, out = v2
    r = out["plugin/ascending"]
    assert r["errors"] == [] and _started(r), (r["error"], r["log"][-3000:])
    assert "Using V2 Model Runner" in r["log"]  # vLLM's own line (cpu_worker.py:162): V2 ran, not the V1 runner


@pytest.mark.parametrize("case", ["final-norm", "not-ascending"])
def test_a_manifest_v2_cannot_feed_is_refused_at_startup(v2, case):
    drafts, out = v2
    r = out[f"plugin/{case}"]
    assert not _started(r)
    (error,) = r["errors"]
    assert (error["file"], error["field"]) == (str(drafts[("llama", case)] / "eagle3_manifest.json"), "layer_ids")


def test_the_check_reads_the_loaded_model_not_the_config(v2):
    drafts, out = v2
    r = out["plugin/default-captured"]
    assert not _started(r)
    (error,) = r["errors"]
    assert (error["file"], error["field"]) == (str(drafts[("llama", "ascending")] / "eagle3_manifest.json"),
                                               "layer_ids")


def test_stock_v2_refuses_the_fail_closed_value_at_startup(v2):
    """Without the plugin, Model Runner V2 reads the top-level ids first, as the V1 runner does: the fail-closed value
    (a final_norm manifest) stops the engine while the model loads, never the default."""
    _, out = v2
    r = out["stock/final-norm"]
    assert not _started(r) and r["errors"] == []
    assert "TypeError" in r["log"]  # vLLM's sort of [0, "..."] (interfaces.py:1578), not a later failure
