"""serving/target.py (through serving/seams.py, the one patch engine): apply / revert / is_patched on the installed
SGLang's real modules and classes; every seam of the installed release and of every family probed."""

import inspect
import sys

import pytest

from sglang_eagle3_capture import families, releases
from sglang_eagle3_capture.errors import PatchError
from sglang_eagle3_capture.serving import draft, seams
from sglang_eagle3_capture.serving import target


def _snapshot():
    """Module namespaces and class __dicts the patch touches (and the subclasses that inherit from them)."""
    from sglang.srt.model_executor import model_runner
    from sglang.srt.models import deepseek_v2, kimi_k25

    owners = {"module deepseek_v2": deepseek_v2, "ModelRunner": model_runner.ModelRunner,
              "module model_runner": model_runner, "module kimi_k25": kimi_k25}
    for name in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV2Model"):
        owners[name] = getattr(deepseek_v2, name)
    owners["KimiK25ForConditionalGeneration"] = kimi_k25.KimiK25ForConditionalGeneration
    return {name: dict(vars(obj)) for name, obj in owners.items()}


def _same(a: dict, b: dict) -> list:
    """Names whose entries differ (by identity), or that only one side has."""
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] is not b[k])


@pytest.fixture(autouse=True)
def _clean():
    target.revert()
    draft.revert_draft_head_patch()
    yield
    target.revert()
    draft.revert_draft_head_patch()


def test_revert_restores_every_namespace_exactly():
    before = _snapshot()
    assert target.apply() is True and target.is_patched()
    during = _snapshot()
    assert _same(before["DeepseekV2ForCausalLM"], during["DeepseekV2ForCausalLM"]) == ["set_eagle3_layers_to_capture"]
    assert _same(before["DeepseekV2Model"], during["DeepseekV2Model"]) == ["_eagle3_capture_feed", "forward"]
    assert _same(before["ModelRunner"], during["ModelRunner"]) == ["init_spec_aux_hidden_state"]
    for untouched in ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
                      "module deepseek_v2", "module kimi_k25", "module model_runner"):
        assert _same(before[untouched], during[untouched]) == [], untouched
    target.revert()
    after = _snapshot()
    assert {name: _same(before[name], after[name]) for name in before} == {name: [] for name in before}
    assert not target.is_patched()


def test_subclasses_and_kimi_see_the_patched_methods():
    from sglang.srt.models import deepseek_v2, kimi_k25

    with target.patched():
        for cls in (deepseek_v2.DeepseekV3ForCausalLM, deepseek_v2.DeepseekV32ForCausalLM,
                    kimi_k25.DeepseekV3ForCausalLM):
            assert getattr(cls.set_eagle3_layers_to_capture, "__eagle3_capture__", False) is True
        # Kimi-K2.5 does not inherit it: its own method delegates to self.language_model (tested in-process).
        assert "set_eagle3_layers_to_capture" in vars(kimi_k25.KimiK25ForConditionalGeneration)


def test_apply_is_idempotent_and_reapplies_after_revert():
    assert target.apply() is True
    deepseek = sys.modules[families.family_of("DeepseekV2ForCausalLM").module]
    first = deepseek.DeepseekV2Model.forward
    assert target.apply() is False
    assert deepseek.DeepseekV2Model.forward is first  # not wrapped twice
    assert first.__wrapped__.__name__ == "forward" and not hasattr(first.__wrapped__, "__eagle3_capture__")
    target.revert()
    assert target.apply() is True and target.is_patched()


def test_patched_context_leaves_an_outer_patch_in_place():
    target.apply()
    with target.patched():
        assert target.is_patched()
    assert target.is_patched()


def _target_seams():
    """The target patch's seams for the installed release: its resolution seam, then every family's."""
    return target.patch_for(releases.check_sglang_version()).seams


def test_status_names_each_target():
    target.apply()
    assert target.status() == ", ".join(f"{s.name}=patched" for s in _target_seams())
    target.revert()
    assert "DeepseekV2Model.forward=original" in target.status()


def test_registry_invariants():
    names = [(s.module, s.owner, s.attr) for s in _target_seams()]
    assert len(set(names)) == len(names)  # no attribute patched twice
    for seam in _target_seams():
        owner = seams.owner_of(seam, import_=True)
        assert owner is not None, seam.name
        seams.probe(seam, owner)  # the pinned SGLang has the shape each replacement was written for


@pytest.mark.release
def test_every_seam_of_the_release_and_every_family_probes_and_reverts_exactly():
    """The release table and the family table, against the installed SGLang: every seam (target and draft side)
    has the owner and parameter names it records, no attribute is patched twice, and applying both patches then
    reverting them leaves every owner's ``__dict__`` exactly as it was (identity of every entry)."""
    release = releases.check_sglang_version()
    target_seams, draft_seams = target.patch_for(release).seams, release.seams_with("draft.")
    assert set(release.seams) <= set(target_seams) | set(draft_seams)  # nothing in the release table left out
    for family in families.all_families():
        assert set(family.seams()) <= set(target_seams), family.name
    every = (*target_seams, *draft_seams)
    keys = [(s.module, s.owner, s.attr) for s in every]
    assert len(set(keys)) == len(keys)
    owners = {}
    for seam in every:
        owner = seams.owner_of(seam, import_=True)
        original = seams.probe(seam, owner)  # raises PatchError naming the seam when it does not fit
        if seam.params is None:  # an attribute the patch adds
            assert original is None and seam.attr not in vars(owner), seam.name
        else:
            assert tuple(inspect.signature(original).parameters) == seam.params, seam.name
        owners[id(owner)] = owner
    before = {k: dict(vars(o)) for k, o in owners.items()}
    assert target.apply() is True and draft.apply_draft_head_patch() is True
    try:
        assert target.is_patched() and draft.is_draft_head_patched()
        for seam in every:
            value = vars(seams.owner_of(seam, import_=False))[seam.attr]
            assert value is None if seam.params is None else getattr(value, seams.MARK, False) is True, seam.name
    finally:
        target.revert()
        draft.revert_draft_head_patch()
    after = {k: dict(vars(o)) for k, o in owners.items()}
    assert {k: _same(before[k], after[k]) for k in before} == {k: [] for k in before}
    assert not target.is_patched() and not draft.is_draft_head_patched()


def test_a_changed_seam_is_refused_before_anything_is_patched(monkeypatch):
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.models.deepseek_v2 import DeepseekV2Model

    def forward(self, input_ids, positions, forward_batch):  # a different SGLang's shape
        raise AssertionError

    monkeypatch.setattr(DeepseekV2Model, "forward", forward)
    resolve = vars(ModelRunner)["init_spec_aux_hidden_state"]
    with pytest.raises(PatchError, match=r"DeepseekV2Model.forward has parameters .* written for"):
        target.apply()
    assert vars(ModelRunner)["init_spec_aux_hidden_state"] is resolve  # all-or-nothing
    assert not target.is_patched() and "_eagle3_capture_feed" not in vars(DeepseekV2Model)
