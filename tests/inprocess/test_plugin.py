"""serving/plugin.py's register(): SGLang's entry point finds it; idempotent; refuses what it cannot patch at startup.

That it is lazy in SGLang's fresh processes is in tests/engine/test_plugin_subprocess.py.
"""

import logging
from pathlib import Path

import pytest

from sglang_eagle3_capture import releases
from sglang_eagle3_capture.errors import UnsupportedSGLangVersion, WiringError
from sglang_eagle3_capture.serving import draft, plugin, target


@pytest.fixture(autouse=True)
def _clean():
    target.revert()
    draft.revert_draft_head_patch()
    yield
    target.revert()
    draft.revert_draft_head_patch()


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
    import sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state  # noqa: F401 (already imported)

    with caplog.at_level(logging.INFO, logger="sglang_eagle3_capture"):
        plugin.register()
        plugin.register()
    assert target.is_patched() and draft.is_draft_head_patched()
    lines = [r.getMessage() for r in caplog.records
             if r.name == "sglang_eagle3_capture.serving.plugin" and "eagle3-capture: patched" in r.getMessage()]
    assert len(lines) == 1
    assert "DeepseekV2ForCausalLM.set_eagle3_layers_to_capture" in lines[0] and "draft-head loader" in lines[0]
    assert "(sglang 0.5.23, pid " in lines[0]
    assert "tp_rank" in lines[0]


def _resolve_eagle3(runner, draft_dir):
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.runtime_context import get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    with get_spec().override(speculative_draft_model_path=str(draft_dir)):
        return resolve_spec_aux_hidden_state_config(
            server_args=runner.model_runner.server_args, model_config=runner.model_runner.model_config,
            spec_algorithm=SpeculativeAlgorithm.EAGLE3, is_draft_worker=False)


def test_unsupported_sglang_is_refused_at_startup(runner, tiny_draft_dir, monkeypatch):
    monkeypatch.setattr(releases, "installed_sglang_version", lambda: "0.6.0")
    with pytest.raises(UnsupportedSGLangVersion):
        plugin.register()  # SGLang's load_plugins would log and swallow this ...
    assert not target.is_patched()
    with pytest.raises(WiringError) as e:  # ... so the target's startup refuses instead
        _resolve_eagle3(runner, tiny_draft_dir)
    msg = str(e.value)
    assert "refuses EAGLE-3 on DeepseekV3ForCausalLM" in msg and "sglang 0.6.0 is not supported" in msg
    assert "pip install sglang==0.5.23" in msg and "SGLANG_PLUGINS" in msg


def test_a_patch_that_does_not_fit_is_refused_at_startup(runner, tiny_draft_dir, monkeypatch, caplog):
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM

    def set_eagle3_layers_to_capture(self, layer_ids, extra):  # a different SGLang's shape
        raise AssertionError

    monkeypatch.setattr(DeepseekV2ForCausalLM, "set_eagle3_layers_to_capture", set_eagle3_layers_to_capture)
    with caplog.at_level(logging.ERROR, logger="sglang_eagle3_capture"):
        plugin.register()  # logs; load_plugins would go on either way
    assert not target.is_patched()
    assert any("target capture not patched" in r.getMessage() and "startup guard installed" in r.getMessage()
               for r in caplog.records)
    with pytest.raises(WiringError, match="the capture patch does not fit this SGLang .*set_eagle3_layers_to_capture"):
        _resolve_eagle3(runner, tiny_draft_dir)
