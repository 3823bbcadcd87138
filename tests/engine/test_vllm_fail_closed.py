"""Fail closed on vLLM without the plugin (issue 27): a draft given its manifest by ``manifest write --fail-closed``
(the same values ``convert`` writes) is, for stock vLLM 0.32, either fed exactly what its manifest says or refused at
startup, never the default.

The top-level ``eagle_aux_hidden_state_layer_ids`` (read first by every stock vLLM runner, never by SGLang) holds the
manifest's HF indices where vLLM can express them (``[-1, 1, 4]``: ``[0, 2, 5]``), else the vLLM fail-closed value (an
integer and a string), on which vLLM's ``tuple(sorted(set(ids)))`` raises a TypeError while the worker loads the model
(``[-1, 1, "final_norm"]``: no vLLM index is the final norm's output; ``[4, -1, 1]``: vLLM sorts). Two ways for the
plugin not to run, through real vLLM: ``excluded`` (``VLLM_PLUGINS`` names no plugin of this package) and ``broken``
(every plugin loads, but importing this one's module raises: tests/support/vllm_site; vLLM logs it and serves on);
the five starts (``RUNS``) in one worker process. "Fed exactly" is read from the fc input itself (the spy), against
HF's hidden states.
"""

from __future__ import annotations

import pytest
import torch

from support.hf_reference import hf_greedy, load_hf
from support.tolerances import VLLM_TOLERANCES
from support.vllm_harness import (
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
# One start per (mode, mechanism, family) that shows something: every inexpressible manifest gets the same value, on
# which vLLM's one shared sort raises, so one refusal per mode (final_norm excluded, the order broken, on the two
# families); the expressible one, read by each family's capture, fed exactly in both families excluded and in one
# broken. Which manifests get which value: tests/unit/test_vllm_policy.py.
RUNS = {"excluded": [("llama", "ascending"), ("qwen3", "ascending"), ("llama", "final-norm")],
        "broken": [("llama", "ascending"), ("qwen3", "not-ascending")]}
FED, REFUSED = ("ascending",), ("final-norm", "not-ascending")
MODES = {"excluded": {"VLLM_PLUGINS": NO_PLUGINS}, "broken": {"EAGLE3_TEST_BREAK_PLUGIN": "1"}}


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
    """Every run in ONE vLLM worker process, the excluded ones first (a front end that never loaded the plugin)."""
    targets, drafts = build_cases(tmp_path_factory.mktemp("vllm-fail-closed"),
                                  [pair for pairs in RUNS.values() for pair in pairs])
    runs = [vllm_run(f"{mode}/{f}/{c}", targets[f], drafts[(f, c)], prompts=[PROMPT], max_tokens=NEW_TOKENS,
                     env=MODES[mode]) for mode, pairs in RUNS.items() for f, c in pairs]
    return targets, {r["name"]: r for r in run_vllm(runs, plugins=None)}


def _runs(out: dict, cases) -> list[tuple[str, str, dict]]:
    return [(mode, f, out[f"{mode}/{f}/{c}"]) for mode, pairs in RUNS.items() for f, c in pairs if c in cases]


def test_an_expressible_manifest_is_fed_exactly_by_stock_vllm(stock):
    targets, out = stock
    runs = _runs(out, FED)
    assert {(m, f) for m, f, _ in runs} == {("excluded", "llama"), ("excluded", "qwen3"), ("broken", "llama")}
    for mode, family, r in runs:
        assert r["ok"], r["error"] + r["log"][-3000:]
        assert "eagle3-capture: patched" not in r["log"]  # the plugin did not run
        if mode == "broken":
            assert "TEST SABOTAGE: import" in r["log"]
        hf = load_hf(targets[family])
        assert r["outputs"] == hf_greedy(hf, [PROMPT], NEW_TOKENS)
        ids = MANIFESTS["ascending"]
        fc = r["spy"][0]
        for chunk, layer_id in zip(fc.split(fc.shape[-1] // len(ids), dim=-1), ids):
            torch.testing.assert_close(chunk, hf_state(hf, layer_id, NUM_LAYERS), **VLLM_TOLERANCES[torch.float32])


def test_an_inexpressible_manifest_is_refused_by_stock_vllm_at_startup(stock):
    _, out = stock
    runs = _runs(out, REFUSED)
    assert {(m, f) for m, f, _ in runs} == {("excluded", "llama"), ("broken", "qwen3")}
    for mode, family, r in runs:
        assert not r["ok"] and r.get("startup_s") is None, r["log"][-3000:]  # LLM() failed: nothing was served
        assert r["spy"] == []  # the draft's fc never ran
        assert "TypeError: '<' not supported between instances of 'str' and 'int'" in r["log"]
        assert "eagle3-capture: patched" not in r["log"]
        if mode == "broken":
            assert "TEST SABOTAGE: import" in r["log"]
