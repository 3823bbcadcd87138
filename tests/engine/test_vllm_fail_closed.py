"""Fail closed on vLLM without the plugin (issue 27): a draft given its manifest by ``manifest write --fail-closed``
(the same values ``convert`` writes) is, for stock vLLM 0.32, either fed exactly what its manifest says or refused at
startup, never the default.

The top-level ``eagle_aux_hidden_state_layer_ids`` (read first by every stock vLLM runner, never by SGLang) holds the
manifest's HF indices where vLLM can express them (``[-1, 1, 4]``: ``[0, 2, 5]``), else the vLLM fail-closed value (an
integer and a string), on which vLLM's ``tuple(sorted(set(ids)))`` raises a TypeError while the worker loads the model
(``[-1, 1, "final_norm"]``: no vLLM index is the final norm's output; ``[4, -1, 1]``: vLLM sorts). Two ways for the
plugin not to run, every case in both, through real vLLM: ``excluded`` (``VLLM_PLUGINS`` names no plugin of this
package) and ``broken`` (every plugin loads, but importing this one's module raises: tests/support/vllm_site; vLLM
logs it and serves on). "Fed exactly" is read from the fc input itself (the spy), against HF's hidden states.
"""

from __future__ import annotations

import pytest
import torch

from support.hf_reference import hf_greedy, load_hf
from support.tolerances import VLLM_TOLERANCES
from support.vllm_harness import (
    FAMILIES,
    MANIFESTS,
    NO_PLUGINS,
    NUM_LAYERS,
    PROMPT,
    build_cases,
    hf_state,
    run_vllm,
    vllm_run,
)

NEW_TOKENS = 6
FED = ("ascending",)  # expressible: stock vLLM feeds the manifest exactly
REFUSED = ("final-norm", "not-ascending")  # inexpressible: stock vLLM refuses at startup
MODES = {"excluded": (NO_PLUGINS, {}), "broken": (None, {"EAGLE3_TEST_BREAK_PLUGIN": "1"})}


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    targets, drafts = build_cases(tmp_path_factory.mktemp("vllm-fail-closed"))
    out = {}
    for mode, (plugins, env) in MODES.items():
        runs = [vllm_run(f"{f}/{c}", targets[f], drafts[(f, c)], prompts=[PROMPT], max_tokens=NEW_TOKENS, env=env)
                for f in FAMILIES for c in MANIFESTS]
        out[mode] = {r["name"]: r for r in run_vllm(runs, plugins=plugins)}
    return targets, out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_an_expressible_manifest_is_fed_exactly_by_stock_vllm(stock, mode, family):
    targets, out = stock
    for case in FED:
        r = out[mode][f"{family}/{case}"]
        assert r["ok"], r["error"] + r["log"][-3000:]
        assert "eagle3-capture: patched" not in r["log"]  # the plugin did not run
        if mode == "broken":
            assert "TEST SABOTAGE: import" in r["log"]
        hf = load_hf(targets[family])
        assert r["outputs"] == hf_greedy(hf, [PROMPT], NEW_TOKENS)
        ids = MANIFESTS[case]
        fc = r["spy"][0]
        for chunk, layer_id in zip(fc.split(fc.shape[-1] // len(ids), dim=-1), ids):
            torch.testing.assert_close(chunk, hf_state(hf, layer_id, NUM_LAYERS), **VLLM_TOLERANCES[torch.float32])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", FAMILIES)
def test_an_inexpressible_manifest_is_refused_by_stock_vllm_at_startup(stock, mode, family):
    _, out = stock
    for case in REFUSED:
        r = out[mode][f"{family}/{case}"]
        assert not r["ok"] and r.get("startup_s") is None, r["log"][-3000:]  # LLM() failed: nothing was served
        assert r["spy"] == []  # the draft's fc never ran
        assert "TypeError: '<' not supported between instances of 'str' and 'int'" in r["log"]
        assert "eagle3-capture: patched" not in r["log"]
