"""Every supported release's seams, probed in that release's wheel source (tools/static_seams.py): the proof behind
"seam probe only" for releases CI does not install, and a second check of those it does.

Needs the package registry (``pip download --no-deps sglang==X``, cached under ~/.cache): marker ``network``. Reads
the source with ``ast``, imports and runs nothing from the wheel.
"""

import sys
from dataclasses import replace

import pytest

from sglang_eagle3_capture.core import families, releases
from sglang_eagle3_capture.doctor import release_table
from support import REPO

sys.path.insert(0, str(REPO / "tools"))
import static_seams  # noqa: E402


@pytest.mark.network
@pytest.mark.parametrize("version", releases.supported_versions())
def test_every_seam_matches_the_release_source(version):
    problems = [f"{seam.role}: {problem}" for seam, problem in static_seams.probe(version) if problem]
    assert problems == []


@pytest.mark.network
def test_the_probe_fails_on_a_release_whose_seams_differ():
    # 0.5.15.post1 has no ModelRunner.init_spec_aux_hidden_state: the newest release's seams must not match it.
    source = static_seams.Source(static_seams.wheel("0.5.15.post1"))
    problems = [static_seams.check(source, seam) for seam in static_seams.seams_of(releases.newest())]
    assert "ModelRunner.init_spec_aux_hidden_state not found" in problems
    assert all(p is None for s, p in zip(static_seams.seams_of(releases.newest()), problems)
               if s.role.startswith("draft."))  # the draft classes did not change shape


def test_a_family_a_release_lacks_is_probed_for_its_absence_not_its_seams():
    newest = releases.newest()
    llama = families.family_of("LlamaForCausalLM")
    lacking = replace(newest, absent_families=(llama.name,))
    present = {(s.module, s.owner, s.attr): s.params for s in static_seams.seams_of(newest)}
    probed = {(s.module, s.owner, s.attr): s.params for s in static_seams.seams_of(lacking)}
    for seam in llama.seams():
        assert (seam.module, seam.owner, seam.attr) in present
        if seam.role != "target.set_eagle3":
            assert (seam.module, seam.owner, seam.attr) not in probed
    for module, cls in llama.causal_lms:  # must not exist: a wheel that has it fails the probe ("already exists")
        assert probed[(module, cls, "set_eagle3_layers_to_capture")] is None


@pytest.mark.network
def test_an_absent_family_is_not_made_present_by_a_hook_inherited_from_another_model_file():
    """Qwen3.5 before 0.5.22: its VL classes inherit Qwen3-VL's hook (which never marks the Qwen3.5 stack's layers),
    its text classes have none; from 0.5.22 qwen3_5_text.py defines one, so calling the family absent there fails."""
    vl = ("sglang.srt.models.qwen3_5", "Qwen3_5ForConditionalGeneration", "set_eagle3_layers_to_capture")
    old = static_seams.Source(static_seams.wheel("0.5.21"))
    assert old.find(*vl)[1] == "sglang.srt.models.qwen3_vl.Qwen3VLForConditionalGeneration"
    absent = [(s, p) for s, p in static_seams.probe("0.5.21") if s.role == static_seams.ABSENT]
    assert {s.owner for s, _ in absent} >= {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"}
    assert all(p is None for _, p in absent)
    lacking = replace(release_table.get("0.5.22"), absent_families=("qwen3_5",))
    new = static_seams.Source(static_seams.wheel("0.5.22"))
    problems = [static_seams.check(new, s) for s in static_seams.seams_of(lacking) if s.role == static_seams.ABSENT]
    assert [p for p in problems if p] == ["Qwen3_5ForCausalLM.set_eagle3_layers_to_capture already exists "
                                          "(sglang.srt.models.qwen3_5_text.Qwen3_5ForCausalLM)"]
