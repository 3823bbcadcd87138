"""core/sglang/target.py (through core/seams.py, the one patch engine): apply / revert / is_patched on the installed
SGLang's real modules and classes; every seam of the installed release and of every family probed; one patch per
family, so a family whose seams changed leaves the others patched."""

import inspect
import sys

import pytest

from sglang_eagle3_capture.core import families, releases, seams
from sglang_eagle3_capture.core.sglang import draft, selfcheck, target
from sglang_eagle3_capture.observe import metrics

# Modules of classes that inherit a family's seams without being seam owners (subclasses the patch must reach).
SUBCLASS_MODULES = ("sglang.srt.models.kimi_k25", "sglang.srt.models.mistral", "sglang.srt.models.ministral3",
                    "sglang.srt.models.mistral_large_3", "sglang.srt.models.mellum", "sglang.srt.models.qwen3_moe")


def _owners() -> dict:
    """Every module the family table and the release name, every class defined in them, and ModelRunner's module."""
    import importlib

    names = {s.module for f in families.all_families() for s in f.seams()} | set(SUBCLASS_MODULES)
    names.add(releases.check_sglang_version().seam("resolve").module)
    owners = {}
    for name in sorted(names):
        module = importlib.import_module(name)
        owners[f"module {name}"] = module
        for cls_name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == name and cls.__name__ == cls_name:  # not EntryClass
                owners[f"{name}.{cls_name}"] = cls
    return owners


def _snapshot(owners=None):
    """Module namespaces and class __dicts the patch touches (and the subclasses that inherit from them)."""
    return {name: dict(vars(obj)) for name, obj in (owners or _owners()).items()}


def _same(a: dict, b: dict) -> list:
    """Names whose entries differ (by identity), or that only one side has."""
    return sorted(k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] is not b[k])


def _revert_all():
    target.revert()
    draft.revert_draft_head_patch()
    metrics.revert()


@pytest.fixture(autouse=True)
def _clean():
    _revert_all()
    yield
    _revert_all()


def test_revert_restores_every_namespace_exactly():
    owners = _owners()
    before = _snapshot(owners)
    assert target.apply() is True and target.is_patched()
    during = _snapshot(owners)
    expected = {}
    for seam in target.patches_for(releases.check_sglang_version())[0].seams + tuple(
            s for f in families.all_families() for s in f.seams()):
        expected.setdefault(f"{seam.module}.{seam.owner}", set()).add(seam.attr)
    changed = {name: set(_same(before[name], during[name])) for name in before if _same(before[name], during[name])}
    assert changed == expected  # exactly the seams, on exactly their owners; no module namespace, no subclass
    target.revert()
    after = _snapshot(owners)
    assert {name: _same(before[name], after[name]) for name in before} == {name: [] for name in before}
    assert not target.is_patched()


def test_subclasses_and_delegating_wrappers_see_the_patched_methods():
    from sglang.srt.models import (
        deepseek_v2,
        glm4_moe,
        kimi_k25,
        llama,
        mellum,
        ministral3,
        mistral,
        mistral_large_3,
        qwen3_moe,
        teleflm,
    )

    with target.patched():
        for cls in (deepseek_v2.DeepseekV3ForCausalLM, deepseek_v2.DeepseekV32ForCausalLM,
                    kimi_k25.DeepseekV3ForCausalLM, glm4_moe.GlmMoeDsaForCausalLM,
                    mistral_large_3.MistralLarge3ForCausalLM, llama.Phi3ForCausalLM, llama.InternLM3ForCausalLM,
                    llama.IQuestCoderForCausalLM, mistral.MistralForCausalLM, mistral.MistralForCausalLMMistralFormat,
                    ministral3.Ministral3ForCausalLM, teleflm.TeleFLMForCausalLM, mellum.MellumForCausalLM):
            assert getattr(cls.set_eagle3_layers_to_capture, seams.MARK, False) is True, cls.__name__
        for stack in (ministral3.Ministral3Model, teleflm.TeleFLMModel, qwen3_moe.Qwen3MoeModel, mellum.MellumModel):
            assert getattr(stack.forward, seams.MARK, False) is True, stack.__name__
        # Kimi-K2.5 does not inherit it: its own method delegates to self.language_model (tested in-process).
        assert "set_eagle3_layers_to_capture" in vars(kimi_k25.KimiK25ForConditionalGeneration)
        # Every architecture a family lists is served by one of its causal LMs (or delegates to one, Kimi-K2.5).
        from sglang.srt.models.registry import ModelRegistry

        for family in families.all_families():
            mine = tuple(getattr(sys.modules[m], c) for m, c in family.causal_lms)
            for arch in family.architectures:
                cls = ModelRegistry.models[arch]
                assert issubclass(cls, mine) or arch in family.text_config, (family.name, arch)


def test_apply_is_idempotent_and_reapplies_after_revert():
    assert target.apply() is True
    module, owner = families.family_of("DeepseekV2ForCausalLM").models[0]
    first = getattr(sys.modules[module], owner).forward
    assert target.apply() is False
    assert getattr(sys.modules[module], owner).forward is first  # not wrapped twice
    assert first.__wrapped__.__name__ == "forward" and not hasattr(first.__wrapped__, "__eagle3_capture__")
    target.revert()
    assert target.apply() is True and target.is_patched()


def test_patched_context_leaves_an_outer_patch_in_place():
    target.apply()
    with target.patched():
        assert target.is_patched()
    assert target.is_patched()


def _target_seams():
    """The target patches' seams for the installed release: its resolution seam, then every family's."""
    return tuple(s for p in target.patches_for(releases.check_sglang_version()) for s in p.seams)


def test_status_names_each_target():
    target.apply()
    assert target.status() == ", ".join(f"{s.name}=patched" for s in _target_seams())
    target.revert()
    assert "DeepseekV2Model.forward=original" in target.status() and "LlamaModel.forward=original" in target.status()


def test_registry_invariants():
    names = [(s.module, s.owner, s.attr) for s in _target_seams()]
    assert len(set(names)) == len(names)  # no attribute patched twice
    for seam in _target_seams():
        owner = seams.owner_of(seam, import_=True)
        assert owner is not None, seam.name
        seams.probe(seam, owner)  # the pinned SGLang has the shape each replacement was written for


@pytest.mark.release
def test_every_seam_of_the_release_and_every_family_probes_and_reverts_exactly():
    """The release table and the family table, against the installed SGLang: every seam (target side, draft side,
    acceptance metrics) has the owner and parameter names it records, no attribute is patched twice, and applying the
    patches then reverting them leaves every owner's ``__dict__`` exactly as it was (identity of every entry)."""
    release = releases.check_sglang_version()
    target_seams, draft_seams, metric_seams = _target_seams(), draft._patch().seams, metrics.patch().seams
    gate_seams = selfcheck.gate_patch(release).seams  # the self-check's transient patch
    assert set(release.seams) <= set(target_seams) | set(draft_seams) | set(gate_seams) | set(metric_seams)
    for family in target.present_families(release):  # less the hooks this release lacks (its absent_hooks)
        assert set(family.seams(release.absent_hooks)) <= set(target_seams), family.name
    every = (*target_seams, *draft_seams, *metric_seams)
    keys = [(s.module, s.owner, s.attr) for s in every]
    assert len(set(keys)) == len(keys)
    for seam in every:  # importing an owner can run a hook an earlier test armed (the plugin's metrics hook)
        seams.owner_of(seam, import_=True)
    _revert_all()  # so what is probed below is SGLang's own
    owners = {}
    for seam in every:
        owner = seams.owner_of(seam, import_=False)
        original = seams.probe(seam, owner)  # raises PatchError naming the seam when it does not fit
        if seam.params is None:  # an attribute the patch adds
            assert original is None and seam.attr not in vars(owner), seam.name
        else:
            assert tuple(inspect.signature(original).parameters) == seam.params, seam.name
        owners[id(owner)] = owner
    before = {k: dict(vars(o)) for k, o in owners.items()}
    assert target.apply() is True and draft.apply_draft_head_patch() is True and metrics.apply() is True
    try:
        assert target.is_patched() and draft.is_draft_head_patched() and seams.is_applied(metrics.patch())
        for seam in every:
            value = vars(seams.owner_of(seam, import_=False))[seam.attr]
            assert value is None if seam.params is None else getattr(value, seams.MARK, False) is True, seam.name
    finally:
        target.revert()
        draft.revert_draft_head_patch()
        metrics.revert()
    after = {k: dict(vars(o)) for k, o in owners.items()}
    assert {k: _same(before[k], after[k]) for k in before} == {k: [] for k in before}
    assert not target.is_patched() and not draft.is_draft_head_patched()


def test_a_changed_seam_leaves_its_family_unpatched_and_the_others_patched(monkeypatch):
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.models.deepseek_v2 import DeepseekV2ForCausalLM, DeepseekV2Model
    from sglang.srt.models.llama import LlamaModel

    def forward(self, input_ids, positions, forward_batch):  # a different SGLang's shape
        raise AssertionError

    monkeypatch.setattr(DeepseekV2Model, "forward", forward)
    set_eagle3 = vars(DeepseekV2ForCausalLM)["set_eagle3_layers_to_capture"]
    assert target.apply() is True
    assert vars(DeepseekV2ForCausalLM)["set_eagle3_layers_to_capture"] is set_eagle3  # all-or-nothing in the family
    assert "_eagle3_capture_feed" not in vars(DeepseekV2Model) and vars(DeepseekV2Model)["forward"] is forward
    assert not target.is_patched() and not target.is_patched("deepseek_v2")
    why = target.unavailable("deepseek_v2")
    assert "DeepseekV2Model.forward" in why
    assert "has parameters ('self', 'input_ids', 'positions', 'forward_batch')" in why
    others = [f.name for f in families.all_families() if f.name != "deepseek_v2"]
    assert all(target.is_patched(name) for name in others) and target.unavailable("llama") is None
    assert getattr(vars(ModelRunner)["init_spec_aux_hidden_state"], seams.MARK, False)  # resolution patched
    assert getattr(LlamaModel.forward, seams.MARK, False)
    target.revert()
    assert target.unavailable("deepseek_v2") is None and not target.is_patched("llama")


def test_a_family_the_release_lacks_is_left_alone_and_named_unavailable(monkeypatch):
    from dataclasses import replace

    from sglang.srt.models.apertus import ApertusForCausalLM

    lacking = replace(releases.check_sglang_version(), absent_families=("apertus",))
    monkeypatch.setattr(releases, "check_sglang_version", lambda: lacking)
    monkeypatch.setattr(releases, "installed_or_newest", lambda: lacking)
    original = vars(ApertusForCausalLM)["set_eagle3_layers_to_capture"]
    assert target.apply() is True
    assert vars(ApertusForCausalLM)["set_eagle3_layers_to_capture"] is original  # never patched
    assert "no model file" in target.unavailable("apertus") and not target.is_patched("apertus")
    assert target.is_patched()  # every family this release has
    assert all(target.is_patched(f.name) for f in families.all_families() if f.name != "apertus")
    target.revert()
    assert target.unavailable("apertus") is None and not target.is_patched("llama")


def test_an_inherited_forward_already_wrapped_is_wrapped_once(monkeypatch):
    """Before 0.5.21 ``Qwen3Model`` had no forward of its own and ran ``Qwen2Model.forward``: the qwen3 family's patch
    then finds the qwen2 family's wrapper through the MRO and must wrap SGLang's own function instead."""
    from sglang.srt.models.qwen2 import Qwen2Model
    from sglang.srt.models.qwen3 import Qwen3Model

    monkeypatch.delattr(Qwen3Model, "forward")  # as in 0.5.17
    stock = Qwen2Model.forward
    target.apply()
    try:
        mine = vars(Qwen3Model)["forward"]
        assert getattr(mine, seams.MARK, False) and mine.__wrapped__ is stock  # not the qwen2 wrapper
        assert vars(Qwen2Model)["forward"].__wrapped__ is stock
    finally:
        target.revert()
    assert "forward" not in vars(Qwen3Model) and Qwen2Model.forward is stock
