"""core/sglang/plugin.py's register(): SGLang's entry point finds it; idempotent; refuses what it cannot patch at
startup.

That it is lazy in SGLang's fresh processes is in tests/engine/test_plugin_subprocess.py.
"""

import logging
from pathlib import Path

import pytest

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.errors import DeploymentError, UnsupportedSGLangVersion
from sglang_eagle3_capture.core.sglang import draft, guard, plugin, target


@pytest.fixture(autouse=True)
def _clean():
    target.revert()
    draft.revert_draft_head_patch()
    guard.disarm()
    yield
    target.revert()
    draft.revert_draft_head_patch()
    guard.disarm()


def test_plugin_group_name_is_the_one_sglang_reads():
    from sglang.srt import plugins

    src = Path(plugins.__file__).read_text()
    assert '"sglang.srt.plugins"' in src or "'sglang.srt.plugins'" in src


def test_sglang_discovers_the_entry_point_and_honours_sglang_plugins(monkeypatch):
    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group

    monkeypatch.setenv("SGLANG_PLUGINS", "eagle3_capture")
    found = load_plugins_by_group(GENERAL_PLUGINS_GROUP)
    assert found["eagle3_capture"][0] is plugin.register
    assert found["eagle3_capture"][1] == "sglang-eagle3-capture"
    monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
    assert "eagle3_capture" not in load_plugins_by_group(GENERAL_PLUGINS_GROUP)


def test_register_is_idempotent_and_logs_once(caplog):
    import sglang.srt.model_executor.model_runner  # noqa: F401 (the trigger module; already imported)

    with caplog.at_level(logging.INFO, logger="sglang_eagle3_capture"):
        plugin.register()
        plugin.register()
    assert target.is_patched() and draft.is_draft_head_patched()
    lines = [r.getMessage() for r in caplog.records
             if r.name == "sglang_eagle3_capture.core.sglang.plugin" and "eagle3-capture: patched" in r.getMessage()]
    assert len(lines) == 1
    assert "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture" in lines[0] and "draft-head loader" in lines[0]
    assert f"(sglang {releases.installed_sglang_version()}, pid " in lines[0]
    assert "tp_rank" in lines[0]


def _start(runner, draft_dir):
    """What a target ModelRunner's ``initialize`` (where the startup guard sits) does for ``draft_dir``: a stand-in
    runner carries the attributes the guard reads; the guard refuses before SGLang's own body would run."""
    from types import SimpleNamespace

    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    sa = SimpleNamespace(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(draft_dir))
    stand_in = SimpleNamespace(server_args=sa, spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False)
    ModelRunner.initialize(stand_in)


@pytest.fixture
def declared_draft(tmp_path, tiny_target_dir):
    """A tiny draft whose eagle3_manifest.json declares the layer ids [-1, 1, 3]."""
    from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
    from support.tiny_models import build_tiny_draft

    d = build_tiny_draft(tmp_path / "declared", target_dir=tiny_target_dir, eagle_aux_layer_ids=[0, 2, 4])
    write_manifest(d, Manifest((-1, 1, 3), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    return d


@pytest.mark.release
def test_unsupported_sglang_is_refused_at_startup(runner, declared_draft, monkeypatch):
    monkeypatch.setattr(releases, "installed_sglang_version", lambda: "0.5.16")
    with pytest.raises(UnsupportedSGLangVersion):
        plugin.register()  # SGLang's load_plugins would log and swallow this ...
    assert not target.is_patched() and guard.is_armed()
    with pytest.raises(UnsupportedSGLangVersion) as e:  # ... so the target's startup refuses instead
        _start(runner, declared_draft)
    assert (e.value.file, e.value.field) == (str(declared_draft / "eagle3_manifest.json"), None)
    assert "refuses to start EAGLE-3" in e.value.problem and "0.5.16" in e.value.problem
    assert "pip install sglang==" in str(e.value) and "SGLANG_PLUGINS" in e.value.fix


def test_the_guard_lets_a_draft_without_declared_ids_run_stock_wiring_and_says_so(tiny_draft_dir, caplog):
    from types import SimpleNamespace

    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    guard.arm("sglang 9.9 is not supported", "install sglang 0.5.23", UnsupportedSGLangVersion)
    sa = SimpleNamespace(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(tiny_draft_dir))
    with caplog.at_level(logging.ERROR, logger="sglang_eagle3_capture"):
        guard.check(SimpleNamespace(server_args=sa, spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False))
    (msg,) = [r.getMessage() for r in caplog.records if "capture patch is not active" in r.getMessage()]
    assert "sglang 9.9 is not supported" in msg and "stock SGLang wiring" in msg


def test_a_family_patch_that_does_not_fit_is_refused_at_startup_and_spares_the_others(runner, declared_draft,
                                                                                      monkeypatch, caplog):
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    from support.resolution import resolve_through_sglang

    def set_eagle3_layers_to_capture(self, layer_ids, extra):  # a different SGLang's shape
        raise AssertionError

    monkeypatch.setattr(DeepseekV2ForCausalLM, "set_eagle3_layers_to_capture", set_eagle3_layers_to_capture)
    with caplog.at_level(logging.ERROR, logger="sglang_eagle3_capture"):
        plugin.register()  # logs; load_plugins would go on either way
    assert not target.is_patched() and not target.is_patched("deepseek_v2") and not guard.is_armed()
    assert target.is_patched("llama") and target.is_patched("qwen_moe")  # the other families are patched
    assert any("the deepseek_v2 family is NOT patched" in r.getMessage() for r in caplog.records)
    with pytest.raises(DeploymentError) as e:  # the target's resolution refuses the declared draft, naming why
        resolve_through_sglang(runner, declared_draft)
    assert (e.value.file, e.value.field) == (str(declared_draft / "eagle3_manifest.json"), "layer_ids")
    assert "capture patch is incomplete for the deepseek_v2 family" in e.value.problem and e.value.fix
    assert "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture" in e.value.problem
    assert "has parameters ('self', 'layer_ids', 'extra')" in e.value.problem
