"""Fail closed without the plugin (issue 21 part 1): a draft given a manifest with ``manifest write --fail-closed`` (the
same value ``convert`` writes, :func:`sglang_eagle3_capture.doctor.readings.fail_closed_eagle_config_ids`) is either fed
exactly what its manifest says by stock SGLang too, or stock SGLang refuses to start with it.

Two ways for the plugin not to run, each through a real ``sglang.Engine`` in subprocesses, every case in both:

- ``excluded``: ``SGLANG_PLUGINS`` names no plugin of this package (SGLang skips its entry point unloaded);
- ``broken``: the plugin is named, but importing its entry point raises (tests/support/broken_plugin_site, first on
  PYTHONPATH; SGLang logs "Failed to load plugin eagle3_capture" and serves on).

Inexpressible cases (stock SGLang must refuse at startup, in ``set_eagle3_layers_to_capture``, called while the
target's ModelRunner initialises): a lone layer id 0 (DeepSeek reads ``[1]`` as output-of-layer), the last layer
``N-1`` (past the capture loop), an fc order that is not ascending (captures arrive in loop order), and layer id -1 on
Llama (0.5.17 .. 0.5.21 crash at the embedding, so no id list serves every supported release), and the post-norm final
state ``"final_norm"`` (no stock loop captures the final norm's output). Expressible cases
(stock SGLang must feed exactly): the trained fixtures' drafts with ids stock SGLang reads right. Without the plugin
there is no dump, so "exactly" is shown by what the fc's input decides: with greedy decoding, the per-request count of
verify steps equals that of a run with the plugin (which feeds the manifest's ids, as its own engine tests prove
against HF hidden states), and the tokens equal the target's greedy tokens.
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
from support.engine_harness import NO_PLUGINS, EngineRunError, engine_run, greedy, run_engine, run_engines
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


REFUSED = {  # case: (fixture or None for the conftest's tiny target, layer ids, the error stock SGLang raises)
    "lone-layer-0": (None, [0], KEY_ERROR),
    "last-layer-past-the-loop": (None, [-1, 0, 5], KEY_ERROR),
    "not-ascending": (None, [1, 0, -1], KEY_ERROR),
    "llama-embedding": ("tiny-llama", [-1, 4, 5], TYPE_ERROR),
    "final-norm": (None, [-1, 1, FINAL_NORM], KEY_ERROR),  # no stock loop captures the final norm's output
}


MODES = ("excluded", "broken")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_stock_sglang_refuses_to_start_with_an_inexpressible_manifest(case, mode, tiny_target_dir, tmp_path):
    fixture, ids, error = REFUSED[case]
    if fixture is None:
        target, draft = tiny_target_dir, _tiny_draft(tmp_path, tiny_target_dir, ids)
    else:
        target, draft = _fixture_draft(tmp_path, fixture, ids)
    assert is_fail_closed(json.loads((draft / "config.json").read_text())["eagle_config"][IDS_KEY])
    plugins, env = _mode_env(mode)
    log = tmp_path / "engine.log"
    with pytest.raises(EngineRunError):
        run_engine(target, [[5, 6, 7, 8]], draft_path=draft, sampling_params=greedy(2), plugins=plugins, env=env,
                   keep_log=log)
    text = log.read_text(errors="replace")
    _assert_plugin_did_not_run(text, mode)
    # At startup: the target ModelRunner's initialisation configures the capture and raises; nothing was generated.
    assert "configure_aux_hidden_state_capture" in text and "set_eagle3_layers_to_capture" in text, text[-4000:]
    assert error in text, text[-4000:]
    line = next(x for x in text.splitlines() if error in x)
    print(f"{case} ({mode}): stock SGLang refuses to start: {line.strip()}")


EXACT = {  # case: (fixture, layer ids): the fixture draft's trained ids, or others stock SGLang reads right
    "deepseek-embedding-first": ("tiny", [-1, 0, 1]),
    "deepseek-first-loop-index-1": ("tiny", [0, 1, 2]),  # written [2, 3, 1]: [1, ...] would be shifted
    "llama-without-embedding": ("tiny-llama", [0, 4, 5]),
}


@pytest.fixture(scope="module")
def exact_runs(tmp_path_factory) -> dict:
    """Per way of running (the plugin, then each mode without it): every EXACT case's Engine, one after another
    in ONE subprocess (one ``import sglang`` per way), and that subprocess's log; the drafts are made once."""
    drafts, runs = {}, []
    for case, (fixture, ids) in EXACT.items():
        target, draft = _fixture_draft(tmp_path_factory.mktemp(case), fixture, ids)
        prompts = json.loads((SPECS[fixture].directory / "prompts.json").read_text())[:4]
        drafts[case] = draft
        runs.append(engine_run(target, prompts, draft_path=draft, sampling_params=greedy(NEW_TOKENS)))
    out = {"drafts": drafts}
    for way in ("plugin", *MODES):
        plugins, env = ("eagle3_capture", {}) if way == "plugin" else _mode_env(way)
        log = tmp_path_factory.mktemp(f"log-{way}") / "engine.log"
        results = run_engines(runs, plugins=plugins, env=env, keep_log=log)
        out[way] = (dict(zip(EXACT, results)), log.read_text(errors="replace"))
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(EXACT))
def test_stock_sglang_feeds_an_expressible_manifest_exactly(case, mode, exact_runs):
    ec_ids = json.loads((exact_runs["drafts"][case] / "config.json").read_text())["eagle_config"][IDS_KEY]
    assert isinstance(ec_ids, list)
    stock_by_case, log = exact_runs[mode]
    _assert_plugin_did_not_run(log, mode)
    stock, with_plugin = stock_by_case[case], exact_runs["plugin"][0][case]
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
