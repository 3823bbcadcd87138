"""Fail closed without the plugin (issue 21 part 1): a draft given a manifest with ``manifest write --fail-closed`` (the
same value ``convert`` writes, :func:`sglang_eagle3_capture.doctor.readings.fail_closed_eagle_config_ids`) is either fed
exactly what its manifest says by stock SGLang too, or stock SGLang refuses to start with it.

Two ways for the plugin not to run, through a real ``sglang.Engine``:

- ``excluded``: ``SGLANG_PLUGINS`` names no plugin of this package (SGLang skips its entry point unloaded);
- ``broken``: the plugin is named, but importing its entry point raises (tests/support/broken_plugin_site, first on
  PYTHONPATH; SGLang logs "Failed to load plugin eagle3_capture" and serves on).

Inexpressible manifests (stock SGLang must refuse at startup, in ``set_eagle3_layers_to_capture``, called while the
target's ModelRunner initialises) all get the same fail-closed value, so one start per stock reader shows it: the
DeepSeek reader (``layer_ids[0]``, KeyError) on ``[-1, 1, "final_norm"]`` with the plugin excluded, the Llama reader
(``val + 1``, TypeError) on ``[-1, 4, 5]`` with the plugin's import broken. Which manifests are inexpressible and
get that value is tests/unit/test_fail_closed.py's; that every family's stock reader raises on it,
tests/inprocess/test_fail_closed_sglang.py's. Expressible cases (stock SGLang must feed exactly): the trained
fixtures' drafts with ids stock SGLang reads right, with the plugin excluded (and one with its import broken).
Without the plugin there is no dump, so "exactly" is shown by what the fc's input decides: with greedy decoding, the
per-request count of verify steps equals that of a run with the plugin (which feeds the manifest's ids, as its own
engine tests prove against HF hidden states), and the tokens equal.

Every Engine here runs in one subprocess (support/engine_harness.py: a failed start is that run's result).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import sglang_cpu_patches

from fixtures.specs import SPECS
from sglang_eagle3_capture.core.config_keys import IDS_KEY, is_fail_closed
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support.engine_harness import NO_PLUGINS, engine_run, greedy, run_engines
from support.tiny_models import build_tiny_draft

BROKEN_SITE = Path(__file__).resolve().parents[1] / "support" / "broken_plugin_site"
NEW_TOKENS = 6
KEY_ERROR = "KeyError: 0"  # DeepSeek: `if layer_ids and layer_ids[0] == 1`
TYPE_ERROR = 'TypeError: can only concatenate str (not "int") to str'  # Llama: `[val + 1 for val in layer_ids]`


def _mode_env(mode: str) -> tuple[str, dict]:
    """(SGLANG_PLUGINS, extra environment) for a server where the plugin does not run."""
    if mode == "excluded":
        return NO_PLUGINS, {}
    path = os.pathsep.join([str(BROKEN_SITE), sglang_cpu_patches.cpu_env()["PYTHONPATH"]])
    return "eagle3_capture", {"PYTHONPATH": path}


def _fixture_draft(tmp_path, fixture: str, layer_ids: list[int]) -> tuple[Path, Path]:
    """A copy of the fixture's trained draft given ``layer_ids`` by ``manifest write --fail-closed``."""
    spec = SPECS[fixture].directory
    draft = tmp_path / "draft"
    shutil.copytree(spec / "draft", draft)
    write_draft_manifest(draft, layer_ids, spec / "target", force=True, fail_closed=True)
    return spec / "target", draft


def _tiny_draft(tmp_path, target_dir, layer_ids: list) -> Path:
    """A random draft for the conftest's 6-layer DeepSeek-V3 target given ``layer_ids`` the same way."""
    draft = build_tiny_draft(tmp_path / "draft", target_dir=target_dir, num_aux=len(layer_ids))
    write_draft_manifest(draft, layer_ids, target_dir, fail_closed=True)
    return draft


REFUSED = {  # mode: (fixture or None for the conftest's tiny target, layer ids, the error stock SGLang raises)
    # one start per stock reader (the value written for every inexpressible case is the same object, so each
    # reader meets it one way: the per-case values are tests/unit/test_fail_closed.py's, each family's reader
    # against it tests/inprocess/test_fail_closed_sglang.py's), and each way for the plugin not to run once
    "excluded": (None, [-1, 1, FINAL_NORM], KEY_ERROR),  # DeepSeek: no stock loop captures the final norm's output
    "broken": ("tiny-llama", [-1, 4, 5], TYPE_ERROR),  # Llama: 0.5.17 .. 0.5.21 crash at the embedding
}
EXACT = {  # case: (fixture, layer ids): the fixture draft's trained ids, or others stock SGLang reads right
    "deepseek-embedding-first": ("tiny", [-1, 0, 1]),
    "deepseek-first-loop-index-1": ("tiny", [0, 1, 2]),  # written [2, 3, 1]: [1, ...] would be shifted
    "llama-without-embedding": ("tiny-llama", [0, 4, 5]),
}
BROKEN_EXACT = "deepseek-embedding-first"  # the broken import serves this one exactly too
MODES = ("excluded", "broken")


@pytest.fixture(scope="module")
def served(tiny_target_dir, tmp_path_factory) -> dict:
    """Every Engine of this module, one after another in ONE subprocess (one ``import sglang``): each EXACT case with
    the plugin excluded, the excluded refusal, the broken import's exact case and refusal, then each EXACT case with
    the plugin (the reference). ``{"drafts": {case: dir}, "refused": {mode: result}, (way, case): result}``."""
    drafts, runs, keys = {}, [], []
    prompts = {name: json.loads((SPECS[name].directory / "prompts.json").read_text())[:4] for name in SPECS}

    def add(key, target, draft, prompt_list, way, fails=None):
        plugins, env = ("eagle3_capture", {}) if way == "plugin" else _mode_env(way)
        keys.append(key)
        runs.append(engine_run(target, prompt_list, draft_path=draft, sampling_params=greedy(NEW_TOKENS),
                               env={"SGLANG_PLUGINS": plugins, **env}, fails=fails))

    for case, (fixture, ids) in EXACT.items():
        target, drafts[case] = _fixture_draft(tmp_path_factory.mktemp(case), fixture, ids)
    for mode in MODES:
        for case in (EXACT if mode == "excluded" else [BROKEN_EXACT]):
            add((mode, case), SPECS[EXACT[case][0]].directory / "target", drafts[case], prompts[EXACT[case][0]], mode)
        fixture, ids, _ = REFUSED[mode]
        tmp = tmp_path_factory.mktemp(f"refused-{mode}")
        if fixture is None:
            target, draft = tiny_target_dir, _tiny_draft(tmp, tiny_target_dir, ids)
        else:
            target, draft = _fixture_draft(tmp, fixture, ids)
        drafts[f"refused-{mode}"] = draft
        add(("refused", mode), target, draft, [[5, 6, 7, 8]], mode, fails="start")
    for case in EXACT:
        add(("plugin", case), SPECS[EXACT[case][0]].directory / "target", drafts[case], prompts[EXACT[case][0]],
            "plugin")
    results = run_engines(runs, plugins=NO_PLUGINS, timeout=1800)
    return {"drafts": drafts, **dict(zip(keys, results))}


@pytest.mark.parametrize("mode", MODES)
def test_stock_sglang_refuses_to_start_with_an_inexpressible_manifest(mode, served):
    _, ids, error = REFUSED[mode]
    draft = served["drafts"][f"refused-{mode}"]
    assert is_fail_closed(json.loads((draft / "config.json").read_text())["eagle_config"][IDS_KEY])
    result = served[("refused", mode)]
    text = result["log"]
    _assert_plugin_did_not_run(text, mode)
    # At startup: the target ModelRunner's initialisation configures the capture and raises; nothing was generated.
    assert result["failed"] == "start"
    assert "configure_aux_hidden_state_capture" in text and "set_eagle3_layers_to_capture" in text, text[-4000:]
    assert error in text, text[-4000:]
    line = next(x for x in text.splitlines() if error in x)
    print(f"{ids} ({mode}): stock SGLang refuses to start: {line.strip()}")


@pytest.mark.parametrize(("mode", "case"), [("excluded", c) for c in sorted(EXACT)] + [("broken", BROKEN_EXACT)])
def test_stock_sglang_feeds_an_expressible_manifest_exactly(mode, case, served):
    ec_ids = json.loads((served["drafts"][case] / "config.json").read_text())["eagle_config"][IDS_KEY]
    assert isinstance(ec_ids, list)
    stock, with_plugin = served[(mode, case)], served[("plugin", case)]
    _assert_plugin_did_not_run(stock["log"], mode)
    verify = [o["meta_info"]["spec_verify_ct"] for o in stock["outputs"]]
    assert all(v > 0 for v in verify)  # EAGLE-3 really ran
    assert [o["output_ids"] for o in stock["outputs"]] == [o["output_ids"] for o in with_plugin["outputs"]]
    assert verify == [o["meta_info"]["spec_verify_ct"] for o in with_plugin["outputs"]]
    print(f"{case} ({mode}): eagle_config ids {ec_ids}; verify steps per request {verify} for {NEW_TOKENS} tokens, "
          "as with the plugin")


def _assert_plugin_did_not_run(text: str, mode: str) -> None:
    """``broken``: the sabotage fired and SGLang logged the failed load (an ERROR, shown at the engine's log level
    "warning"). Either way no plugin code ran: with it, every case here starts and serves (its own engine tests)."""
    if mode == "broken":
        assert "TEST SABOTAGE: import sglang_eagle3_capture.core.sglang.plugin raises" in text, text[-4000:]
        assert "Failed to load plugin eagle3_capture" in text, text[-4000:]
    assert "Loaded plugin eagle3_capture" not in text and "eagle3-capture:" not in text, text[-4000:]
