"""patch.py: apply / revert / is_patched on SGLang 0.5.23's real modules and classes."""

import sys

import pytest

from sglang_eagle3_capture import patch


def _snapshot():
    """Module namespaces and class __dicts the patch touches (and the subclasses that inherit from them)."""
    from sglang.srt.model_executor.model_runner_components import spec_aux_hidden_state
    from sglang.srt.models import deepseek_v2, kimi_k25

    owners = {"module deepseek_v2": deepseek_v2, "module spec_aux_hidden_state": spec_aux_hidden_state,
              "module kimi_k25": kimi_k25}
    for name in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV2Model"):
        owners[name] = getattr(deepseek_v2, name)
    owners["KimiK25ForConditionalGeneration"] = kimi_k25.KimiK25ForConditionalGeneration
    return {name: dict(vars(obj)) for name, obj in owners.items()}


def _same(a: dict, b: dict) -> list:
    """Names whose entries differ (by identity), or that only one side has."""
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] is not b[k])


@pytest.fixture(autouse=True)
def _clean():
    patch.revert()
    yield
    patch.revert()


def test_revert_restores_every_namespace_exactly():
    before = _snapshot()
    assert patch.apply() is True and patch.is_patched()
    during = _snapshot()
    assert _same(before["DeepseekV2ForCausalLM"], during["DeepseekV2ForCausalLM"]) == ["set_eagle3_layers_to_capture"]
    assert _same(before["DeepseekV2Model"], during["DeepseekV2Model"]) == ["_eagle3_capture_feed", "forward"]
    assert _same(before["module spec_aux_hidden_state"], during["module spec_aux_hidden_state"]) == [
        "_resolve_eagle_aux_hidden_state"]
    for untouched in ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
                      "module deepseek_v2", "module kimi_k25"):
        assert _same(before[untouched], during[untouched]) == [], untouched
    patch.revert()
    after = _snapshot()
    assert {name: _same(before[name], after[name]) for name in before} == {name: [] for name in before}
    assert not patch.is_patched()


def test_subclasses_and_kimi_see_the_patched_methods():
    from sglang.srt.models import deepseek_v2, kimi_k25

    with patch.patched():
        for cls in (deepseek_v2.DeepseekV3ForCausalLM, deepseek_v2.DeepseekV32ForCausalLM,
                    kimi_k25.DeepseekV3ForCausalLM):
            assert getattr(cls.set_eagle3_layers_to_capture, "__eagle3_capture__", False) is True
        # Kimi-K2.5 does not inherit it: its own method delegates to self.language_model (tested in-process).
        assert "set_eagle3_layers_to_capture" in vars(kimi_k25.KimiK25ForConditionalGeneration)


def test_apply_is_idempotent_and_reapplies_after_revert():
    assert patch.apply() is True
    first = sys.modules[patch.DEEPSEEK].DeepseekV2Model.forward
    assert patch.apply() is False
    assert sys.modules[patch.DEEPSEEK].DeepseekV2Model.forward is first  # not wrapped twice
    assert first.__wrapped__.__name__ == "forward" and not hasattr(first.__wrapped__, "__eagle3_capture__")
    patch.revert()
    assert patch.apply() is True and patch.is_patched()


def test_patched_context_leaves_an_outer_patch_in_place():
    patch.apply()
    with patch.patched():
        assert patch.is_patched()
    assert patch.is_patched()


def test_status_names_each_target():
    patch.apply()
    assert patch.status() == ", ".join(f"{t.name}=patched" for t in patch.TARGETS)
    patch.revert()
    assert "DeepseekV2Model.forward=original" in patch.status()


def test_registry_invariants():
    names = [(t.module, t.owner, t.attr) for t in patch.TARGETS]
    assert len(set(names)) == len(names)  # no attribute patched twice
    for target in patch.TARGETS:
        owner = patch._owner(target, import_=True)
        assert owner is not None, target.name
        patch._probe(target, owner)  # the pinned SGLang has the shape each replacement was written for


def test_a_changed_seam_is_refused_before_anything_is_patched(monkeypatch):
    from sglang.srt.model_executor.model_runner_components import spec_aux_hidden_state
    from sglang.srt.models.deepseek_v2 import DeepseekV2Model

    def forward(self, input_ids, positions, forward_batch):  # a different SGLang's shape
        raise AssertionError

    monkeypatch.setattr(DeepseekV2Model, "forward", forward)
    resolve = spec_aux_hidden_state._resolve_eagle_aux_hidden_state
    with pytest.raises(patch.PatchError, match=r"DeepseekV2Model.forward has parameters .* written for"):
        patch.apply()
    assert spec_aux_hidden_state._resolve_eagle_aux_hidden_state is resolve  # all-or-nothing
    assert not patch.is_patched() and "_eagle3_capture_feed" not in vars(DeepseekV2Model)
