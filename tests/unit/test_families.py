"""The family table (sglang_eagle3_capture/core/families/) without SGLang: its invariants, the per-family stock readings
per release, the startup refusals, the compatibility unit of a manifest, and the patch engine's two rules for
class hierarchies (no double wrapping through the MRO; a forward reached through ``super().forward()`` feeds once).

That the table's seams fit SGLang's real classes is in tests/inprocess/test_target_patch.py; that each family's
capture equals HF is in tests/engine/test_families_capture.py and tests/engine/test_families_engine.py.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core import families, releases, seams
from sglang_eagle3_capture.core.capture import CaptureError, FcFeed, plan_capture
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.families import LIST, PACKED, Family
from sglang_eagle3_capture.core.manifest import Manifest, check_target, write_manifest
from sglang_eagle3_capture.core.releases.schema import ALWAYS_SHIFT, KEEP_IF_MAX_IS_N, SHIFT_IF_FIRST_IS_1
from sglang_eagle3_capture.core.sglang import selfcheck, target
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds, resolve_target_capture
from sglang_eagle3_capture.core.stock import stock_rule, stock_sglang_capture
from sglang_eagle3_capture.core.target_config import target_dims
from sglang_eagle3_capture.doctor import release_table
from support.cli import run
from support.tiny_models import build_tiny_draft

ISSUE_FAMILIES = {  # the architectures the issue names, and the family each belongs to
    "LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen_moe", "GptOssForCausalLM": "gpt_oss", "Glm4MoeForCausalLM": "glm4_moe",
    "MiniMaxM2ForCausalLM": "minimax_m2", "DeepseekV3ForCausalLM": "deepseek_v2",
    "GlmMoeDsaForCausalLM": "deepseek_v2", "MistralLarge3ForCausalLM": "deepseek_v2",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite", "MistralForCausalLM": "llama", "Phi3ForCausalLM": "llama",
    "Qwen2_5_VLForConditionalGeneration": "qwen2", "Qwen3VLForConditionalGeneration": "qwen3_vl",
    "Qwen3VLMoeForConditionalGeneration": "qwen3_vl",
}


def eagle(ids):
    return {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}


# --- the table --------------------------------------------------------------------------------------------------

def test_every_architecture_of_the_issue_has_its_family_and_unknown_ones_none():
    assert {a: families.family_of(a).name for a in ISSUE_FAMILIES} == ISSUE_FAMILIES
    assert families.family_of("FalconForCausalLM") is None and families.family_of(None) is None


def test_table_invariants():
    fams = families.all_families()
    assert len({f.name for f in fams}) == len(fams)
    archs = [a for f in fams for a in f.architectures]
    assert len(set(archs)) == len(archs)  # an architecture belongs to one family
    keys = [(s.module, s.owner, s.attr) for f in fams for s in f.seams()]
    assert len(set(keys)) == len(keys)  # no attribute is patched by two families
    for f in fams:
        assert {s.role for s in f.seams()} == {"target.set_eagle3", "target.forward", "target.feed_slot"}, f.name
        assert f.container in (PACKED, LIST) and set(f.text_config) <= set(f.architectures), f.name
    names = {f.name for f in fams}
    for r in release_table.all_releases():  # the release table names only families that exist
        named = (set(r.stock_rules) | set(r.embedding_crashes) | set(r.final_norm_captures)
                 | set(r.deepstack_before_add) | set(r.branch_captures))
        assert named | set(r.absent_families) <= names, r.version
        assert not named & set(r.absent_families), r.version  # no fact about a family the release lacks
    assert [f.name for f in fams if f.container == PACKED] == ["deepseek_v2"]
    assert [f.name for f in fams if f.layer_flag] == ["qwen_moe", "minimax_m3", "qwen3_5", "qwen3_next"]
    for r in release_table.all_releases():  # an absent hook is a causal LM of a family the release has
        hooks = {cls for f in fams if f.name not in r.absent_families for _, cls in f.causal_lms}
        assert set(r.absent_hooks) <= hooks, r.version


@pytest.mark.parametrize("family, rules", [
    ("llama", {v: ALWAYS_SHIFT for v in ("0.5.11", "0.5.17", "0.5.21", "0.5.23")}),
    ("qwen3", {v: ALWAYS_SHIFT for v in ("0.5.11", "0.5.17", "0.5.23")}),
    ("gpt_oss", {"0.5.11": ALWAYS_SHIFT, "0.5.13.post1": ALWAYS_SHIFT, "0.5.15.post1": ALWAYS_SHIFT,
                 "0.5.17": KEEP_IF_MAX_IS_N, "0.5.21": KEEP_IF_MAX_IS_N, "0.5.23": KEEP_IF_MAX_IS_N}),
    ("deepseek_v2", {"0.5.11": ALWAYS_SHIFT, "0.5.13.post1": SHIFT_IF_FIRST_IS_1, "0.5.23": SHIFT_IF_FIRST_IS_1}),
    ("glm4_moe_lite", {"0.5.11": ALWAYS_SHIFT, "0.5.13.post1": SHIFT_IF_FIRST_IS_1, "0.5.23": SHIFT_IF_FIRST_IS_1}),
    ("qwen3_5", {"0.5.22": ALWAYS_SHIFT, "0.5.23": ALWAYS_SHIFT}),
    ("qwen3_next", {v: ALWAYS_SHIFT for v in ("0.5.17", "0.5.21", "0.5.23")}),
])
def test_stock_rule_per_release(family, rules):
    """SGLang's readings per release (docs/families.md; the release files cite the lines)."""
    assert {v: stock_rule(family, release_table.get(v)) for v in rules} == rules


@pytest.mark.parametrize("family, first_ok", [("llama", "0.5.22"), ("glm4_moe", "0.5.21"),
                                              ("glm4_moe_lite", "0.5.21"), ("gpt_oss", "0.5.17"),
                                              ("deepseek_v2", "0.5.15.post1"), ("qwen3", "0.5.11"),
                                              ("qwen_moe", "0.5.11"), ("minimax_m2", "0.5.11"), ("qwen2", "0.5.11"),
                                              ("apertus", "0.5.22"), ("llama4", "0.5.21"),
                                              ("exaone_moe", "0.5.22"), ("longcat_flash", "0.5.21"),
                                              ("bailing_moe", "0.5.11")])
def test_embedding_reachable_from(family, first_ok):
    """Loop index 0 crashes (``hidden_states + residual`` with no residual) in every release before ``first_ok``."""
    versions = [r.version for r in release_table.all_releases()]
    crashes = [v for v in versions if family in release_table.get(v).embedding_crashes]
    assert crashes == versions[:versions.index(first_ok)]


# --- stock readings per family ----------------------------------------------------------------------------------

def test_llama_eagle_config_ids_are_layer_ids_in_every_release_without_minus_one():
    for r in release_table.all_releases():
        c = stock_sglang_capture(eagle([0, 15, 28]), 32, family="llama", release=r)
        assert (c.loop_indices, c.fed_layer_ids, c.problem) == ((1, 16, 29), (0, 15, 28), None), r.version


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next"])
def test_hybrid_families_stock_readings(family):
    """Qwen3.5 and Qwen3-Next add 1 and read a per-layer flag SGLang sets on ``self.layers[i]``: -1 reaches the
    embedding, N-1 (loop index N) fails at startup with IndexError; Qwen3.5 has no EAGLE-3 capture before 0.5.22."""
    c = stock_sglang_capture(eagle([-1, 1, 4]), 6, family=family, release="0.5.23")
    assert (c.loop_indices, c.fed_layer_ids, c.problem) == ((0, 2, 5), (-1, 1, 4), None)
    c = stock_sglang_capture(eagle([-1, 1, 5]), 6, family=family, release="0.5.23")
    assert "IndexError" in c.problem and c.refuses_at_startup
    c = stock_sglang_capture(eagle([-1, 1, 4]), 6, family=family, release="0.5.21")
    if family == "qwen3_5":
        assert (c.loop_indices, c.fed_layer_ids, c.rule) == ((), (), "no EAGLE-3 capture") and "0.5.21" in c.problem
    else:
        assert (c.fed_layer_ids, c.problem) == ((-1, 1, 4), None)


def test_minus_one_on_llama_crashes_before_0_5_22_only():
    assert "TypeError" in stock_sglang_capture(eagle([-1, 15, 28]), 32, family="llama", release="0.5.21").problem
    c = stock_sglang_capture(eagle([-1, 15, 28]), 32, family="llama", release="0.5.22")
    assert c.fed_layer_ids == (-1, 15, 28) and c.problem is None


def test_gpt_oss_list_whose_max_is_n_is_read_as_loop_indices_from_0_5_17():
    c = stock_sglang_capture(eagle([0, 12, 24]), 24, family="gpt_oss", release="0.5.23")
    assert c.loop_indices == (0, 12, 24) and c.fed_layer_ids == (-1, 11, 23) and c.problem is None  # 23 at final norm
    c = stock_sglang_capture(eagle([0, 12, 23]), 24, family="gpt_oss", release="0.5.23")
    assert c.loop_indices == (1, 13, 24) and c.fed_layer_ids == (0, 12, 23) and c.problem is None
    old = stock_sglang_capture(eagle([0, 12, 24]), 24, family="gpt_oss", release=release_table.get("0.5.15.post1"))
    assert old.loop_indices == (1, 13, 25) and old.fed_layer_ids == (0, 12) and "never reached" in old.problem
    old = stock_sglang_capture(eagle([0, 12, 23]), 24, family="gpt_oss", release=release_table.get("0.5.15.post1"))
    assert old.fed_layer_ids == (0, 12) and "fc fails" in old.problem  # no final-norm capture before 0.5.17


def test_the_last_layer_fails_differently_per_family():
    ids = eagle([0, 12, 23])  # 23 = N-1: loop index 24 = N, past every loop
    qwen_moe = stock_sglang_capture(ids, 24, family="qwen_moe")
    assert qwen_moe.fed_layer_ids == (0, 12) and "IndexError" in qwen_moe.problem
    assert "self.layers[24]" in qwen_moe.problem
    for family in ("llama", "qwen2", "qwen3", "glm4_moe", "minimax_m2", "bailing_moe", "longcat_flash"):
        c = stock_sglang_capture(ids, 24, family=family)
        assert c.fed_layer_ids == (0, 12) and "silently" in c.problem and "input width" in c.problem, family
    minimax_m3 = stock_sglang_capture(ids, 24, family="minimax_m3", release="0.5.23")  # captured at its final norm
    assert minimax_m3.fed_layer_ids == (0, 12, 23) and minimax_m3.problem is None
    minimax_m3 = stock_sglang_capture(ids, 24, family="minimax_m3", release="0.5.22")  # not before 0.5.23
    assert minimax_m3.fed_layer_ids == (0, 12) and "silently" in minimax_m3.problem
    deepseek = stock_sglang_capture(eagle([1, 12, 23]), 24, family="deepseek_v2")
    assert "captured 2 of 3 aux hidden states" in deepseek.problem


def test_deepseek_and_glm_flash_follow_the_first_id_heuristic():
    for family in ("deepseek_v2", "glm4_moe_lite"):
        assert stock_sglang_capture(eagle([1, 29, 57]), 61, family=family).fed_layer_ids == (1, 29, 57)
        assert stock_sglang_capture(eagle([0, 3, 31]), 61, family=family).fed_layer_ids == (-1, 2, 30)
    lite = stock_sglang_capture(eagle([-1, 2, 30]), 61, family="glm4_moe_lite")  # -1 misses the loop: a list,
    assert lite.fed_layer_ids == (1, 29) and "silently" in lite.problem  # so nothing counts it


def _llama_8b(tmp_path, ids):
    target = tmp_path / "llama-3.1-8b"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                                    "num_hidden_layers": 32, "hidden_size": 4096}))
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096,
                                                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}))
    return draft, target


def test_inspect_llama_8b_with_eagle_config_0_15_28_is_consistent_on_0_5_23(tmp_path, capsys):
    """Every reading of [0, 15, 28] on a Llama target agrees (always +1, no -1): layer ids [0, 15, 28]."""
    draft, target_dir = _llama_8b(tmp_path, [0, 15, 28])
    rc, out, err = run(capsys, "inspect", draft, "--target", target_dir, "--sglang", "0.5.23", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["verdict"] == "consistent" and r["declared"]["layer_ids"] == [0, 15, 28]
    rows = {w["name"]: w for w in r["stock_sglang"]}
    assert rows["stock SGLang 0.5.23"]["layer_ids"] == [0, 15, 28] and rows["stock SGLang 0.5.23"]["status"] == \
        "consistent"
    assert rows["stock SGLang 0.5.23"]["hf_indices"] == [1, 16, 29]


def test_inspect_reads_a_gpt_oss_list_whose_max_is_n_as_loop_indices(tmp_path, capsys):
    """[1, 11, 24] on a 24-layer GPT-OSS: no layer 24 to hook, so only SGLang's reading (0.5.17 on) remains."""
    target_dir, draft = tmp_path / "gpt-oss", tmp_path / "draft"
    target_dir.mkdir()
    draft.mkdir()
    (target_dir / "config.json").write_text(json.dumps({"architectures": ["GptOssForCausalLM"],
                                                        "num_hidden_layers": 24, "hidden_size": 2880}))
    (draft / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 2880,
                                                   "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 24]}}))
    rc, out, err = run(capsys, "inspect", draft, "--target", target_dir, "--sglang", "0.5.23", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["verdict"] == "consistent" and r["declared"]["layer_ids"] == [0, 10, 23]


def test_inspect_llama_8b_with_minus_one_crashes_on_0_5_21(tmp_path, capsys):
    draft, target_dir = _llama_8b(tmp_path, [-1, 15, 28])
    rc, out, _ = run(capsys, "inspect", draft, "--target", target_dir, "--sglang", "0.5.21", "--json")
    r = json.loads(out)
    assert r["verdict"] == "crash" and "TypeError" in r["summary"] and rc != 0


# --- compatibility unit -------------------------------------------------------------------------------------------

def test_a_manifest_is_checked_by_family():
    m = Manifest((-1, 15, 28), "LlamaForCausalLM", 32, 4096, {"source": "manual"})
    for arch in ("MistralForCausalLM", "Phi3ForCausalLM", "LlamaForCausalLM"):
        check_target(m, {"architectures": [arch], "num_hidden_layers": 32, "hidden_size": 4096}, where=arch)
    with pytest.raises(InputError) as e:
        check_target(m, {"architectures": ["Qwen2ForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096},
                     where="qwen2")
    assert (e.value.file, e.value.field) == ("qwen2", "architectures") and "LlamaForCausalLM" in e.value.problem
    with pytest.raises(InputError) as e:
        check_target(m, {"architectures": ["MistralForCausalLM"], "num_hidden_layers": 40, "hidden_size": 4096},
                     where="mistral")
    assert (e.value.file, e.value.field) == ("mistral", "num_hidden_layers") and e.value.fix


# --- startup refusals ---------------------------------------------------------------------------------------------

class _Eagle3:
    name = "EAGLE3"

    def is_eagle(self):
        return True

    def is_eagle3(self):
        return True

    def is_standalone(self):
        return False


def _resolve(tmp_path, arch, ids, release):
    tdir = tmp_path / "t"
    tdir.mkdir(exist_ok=True)
    cfg = {"architectures": [arch], "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4,
           "max_position_embeddings": 512, "vocab_size": 256}
    if arch in families.text_config_architectures():  # a wrapper reads its decoder dimensions there (Llama 4)
        cfg["text_config"] = {k: v for k, v in cfg.items() if k != "architectures"}
    (tdir / "config.json").write_text(json.dumps(cfg))
    draft = build_tiny_draft(tmp_path / "d", target_dir=tdir, num_aux=len(ids))
    write_manifest(draft, Manifest(tuple(ids), arch, 6, 64, {"source": "manual"}))
    return resolve_target_capture(
        config=SimpleNamespace(eagle_use_aux_hidden_state=True), server_args=SimpleNamespace(pp_size=1),
        model_config=SimpleNamespace(hf_config=cfg), spec_algorithm=_Eagle3(), is_draft_worker=False,
        draft_path=str(draft), draft_hf_config=lambda: json.loads((draft / "config.json").read_text()),
        release=release_table.get(release))


@pytest.mark.parametrize("release", [r.version for r in releases.supported()])
@pytest.mark.parametrize("family", [f for f in families.all_families()], ids=lambda f: f.name)
def test_minus_one_is_refused_exactly_where_the_family_loop_crashes(tmp_path, family, release):
    arch = family.architectures[0]
    if family.name in release_table.get(release).embedding_crashes:
        with pytest.raises(DeploymentError) as e:
            _resolve(tmp_path, arch, [-1, 1, 4], release)
        msg = str(e.value)
        assert f"the {family.name} family's capture loop in SGLang {release}" in msg and "layer id -1" in msg
        assert "upgrade SGLang" in msg and "without layer id -1" in msg
        assert _resolve(tmp_path, arch, [0, 1, 4], release).layer_ids == (0, 1, 4)  # without -1 it serves
    else:
        declared = _resolve(tmp_path, arch, [-1, 1, 4], release)
        assert (declared.layer_ids, declared.family) == ((-1, 1, 4), family.name)
        assert declared.plan.loop_indices == (0, 2, 5)


def test_an_architecture_without_a_family_is_refused_naming_the_families(tmp_path):
    with pytest.raises(DeploymentError) as e:
        _resolve(tmp_path, "FalconForCausalLM", [-1, 1, 4], releases.newest().version)
    assert e.value.field == "architectures" and "FalconForCausalLM" in e.value.problem and e.value.fix
    for f in families.all_families():
        assert f"{f.name} (" in e.value.problem and f.architectures[0] in e.value.problem



# Architectures of SGLang 0.5.23 model files with an EAGLE-3 hook that no family serves (docs/families.md, "Every
# model file"): a draft that declares layer ids on one must stop the server at startup, never run on stock wiring.
REFUSED = ("Gemma4UnifiedForConditionalGeneration", "Glm5NextForConditionalGeneration",
           "Llama4ForCausalLM", "MindSporeForCausalLM")


@pytest.mark.parametrize("arch", REFUSED)
def test_a_refused_architecture_is_refused_at_startup(tmp_path, arch):
    assert families.family_of(arch) is None
    with pytest.raises(DeploymentError) as e:
        _resolve(tmp_path, arch, [-1, 1, 4], releases.newest().version)
    assert e.value.field == "architectures" and arch in e.value.problem and e.value.fix


def test_a_hook_the_release_lacks_is_left_out_of_the_patch_and_a_draft_on_it_refused(tmp_path):
    """0.5.17's MiniMaxM3SparseForConditionalGeneration has no set_eagle3_layers_to_capture (the release table's
    ``absent_hooks``): the family is patched without it (its text class and stack still are), and a draft that
    declares layer ids on it is refused naming the class, the release and the fix; 0.5.18 has the hook."""
    vl = "MiniMaxM3SparseForConditionalGeneration"
    family = families.family_of(vl)
    old, new = release_table.get("0.5.17"), release_table.get("0.5.18")
    hooked = {release.version: {s.owner for s in target.family_patch(family, release).seams
                                if s.role == "target.set_eagle3"} for release in (old, new)}
    assert hooked == {"0.5.17": {"MiniMaxM3SparseForCausalLM"}, "0.5.18": {"MiniMaxM3SparseForCausalLM", vl}}
    assert {s.owner for s in target.family_patch(family, old).seams if s.role == "target.forward"} == {"MiniMaxM3Model"}
    tdir = tmp_path / "t"
    tdir.mkdir()
    dims = {"num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4, "max_position_embeddings": 512,
            "vocab_size": 256}
    cfg = {"architectures": [vl], "text_config": dims, **dims}
    (tdir / "config.json").write_text(json.dumps(cfg))
    draft = build_tiny_draft(tmp_path / "d", target_dir=tdir, num_aux=3)
    write_manifest(draft, Manifest((-1, 1, 4), vl, 6, 64, {"source": "manual"}))
    kwargs = dict(config=SimpleNamespace(eagle_use_aux_hidden_state=True), server_args=SimpleNamespace(pp_size=1),
                  model_config=SimpleNamespace(hf_config=cfg), spec_algorithm=_Eagle3(), is_draft_worker=False,
                  draft_path=str(draft), draft_hf_config=lambda: json.loads((draft / "config.json").read_text()))
    with pytest.raises(DeploymentError) as e:
        resolve_target_capture(**kwargs, release=old)
    assert e.value.field == "layer_ids" and vl in e.value.problem and "0.5.17" in e.value.problem
    assert "upgrade SGLang" in e.value.fix
    assert resolve_target_capture(**kwargs, release=new).plan.loop_indices == (0, 2, 5)


def test_longcat_layer_count_is_num_layers_where_the_config_has_no_num_hidden_layers(tmp_path):
    """SGLang's LongcatFlashConfig takes num_hidden_layers, else num_layers (the key transformers writes; HF's own
    num_hidden_layers is 2 * num_layers, the attention sublayers): inspect/verify/manifest write read the same."""
    cfg = {"architectures": ["LongcatFlashForCausalLM"], "num_layers": 28, "hidden_size": 6144}
    assert target_dims(cfg, "c") == ("LongcatFlashForCausalLM", 28, 6144)
    assert target_dims({**cfg, "num_hidden_layers": 14}, "c")[1] == 14  # SGLang's own key first
    with pytest.raises(InputError) as e:  # another family's config without num_hidden_layers is still refused
        target_dims({**cfg, "architectures": ["LlamaForCausalLM"]}, "c")
    assert e.value.field == "num_hidden_layers" and e.value.fix


def _coverage_rows() -> dict[str, str]:
    """docs/families.md's table of model files: file -> verdict (a family name, or "refused")."""
    from support import REPO

    text = (REPO / "docs" / "families.md").read_text()
    section = text.split("## Every model file of SGLang 0.5.23 with an EAGLE-3 hook", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0].endswith(".py`"):
            assert cells[0] not in rows, cells[0]
            rows[cells[0].strip("`")] = cells[2].replace("**", "").replace("(new)", "").strip()
    return rows


def test_the_model_file_table_has_one_row_per_installed_file_with_an_eagle3_hook():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("SGLang is not installed")
    models = Path(next(iter(spec.submodule_search_locations))) / "srt" / "models"
    hooked = {f.name for f in models.glob("*.py") if "def set_eagle3_layers_to_capture" in f.read_text()}
    rows = _coverage_rows()
    assert set(rows) == hooked
    names = {f.name for f in families.all_families()}
    assert set(rows.values()) <= names | {"refused"}
    assert names <= set(rows.values())  # every family is some file's verdict

# --- the patch engine on class hierarchies -----------------------------------------------------------------------

def _fake_module(name):
    """A module with a causal LM, a decoder stack, a subclass with its own forward calling super().forward(), and
    a subclass that inherits forward, as llama.py / teleflm.py / ministral3.py have them."""
    m = types.ModuleType(name)
    m.calls = []

    class Stack:
        def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
            m.calls.append(type(self).__name__)
            return ("hidden", [input_ids])

    class OwnForward(Stack):
        def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
            return super().forward(input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)

    class Inherits(Stack):
        pass

    class CausalLM:
        def set_eagle3_layers_to_capture(self, layer_ids=None):
            pass

    for cls in (Stack, OwnForward, Inherits, CausalLM):
        cls.__module__ = name
        setattr(m, cls.__name__, cls)
    sys.modules[name] = m
    return m


@pytest.fixture
def fake():
    m = _fake_module("fake_family_models")
    yield m
    del sys.modules["fake_family_models"]


def _family(name, models):
    return Family(name=name, architectures=(f"{name}Arch",), causal_lms=(("fake_family_models", "CausalLM"),),
                  models=tuple(("fake_family_models", c) for c in models), stock_rule=ALWAYS_SHIFT)


def test_a_forward_reached_through_super_applies_the_feed_exactly_once(fake):
    patch = target.family_patch(_family("fake", ("Stack", "OwnForward")))
    fed = []
    assert seams.apply(patch)
    try:
        for cls in (fake.Stack, fake.OwnForward, fake.Inherits):
            stack = cls()
            stack._eagle3_capture_feed = lambda model, out, *picked: fed.append((type(model).__name__, picked)) or out
            assert stack.forward("ids", "pos", "fb") == ("hidden", ["ids"])
        assert fed == [("Stack", ("ids", "pos", "fb")), ("OwnForward", ("ids", "pos", "fb")),
                       ("Inherits", ("ids", "pos", "fb"))]
        assert fake.calls == ["Stack", "OwnForward", "Inherits"]  # SGLang's loop ran once per forward
        assert fake.OwnForward().forward("ids", "pos", "fb") and len(fed) == 3  # no feed installed: nothing runs
    finally:
        seams.revert(patch)
    assert "forward" not in vars(fake.Inherits) and not hasattr(fake.Stack.forward, seams.MARK)


def test_probe_unwraps_an_inherited_replacement_instead_of_wrapping_it_again(fake):
    stock = fake.Stack.forward
    first = target.family_patch(_family("first", ("Stack",)))
    second = Family(name="second", architectures=("SecondArch",), causal_lms=(("fake_family_models", "CausalLM"),),
                    models=(("fake_family_models", "Inherits"),), stock_rule=ALWAYS_SHIFT)
    # the same causal LM in two families would patch it twice: keep only the decoder stack seams for the second
    second_patch = seams.Patch("target.second", tuple(s for s in second.seams() if s.role != "target.set_eagle3"),
                               target.family_patch(second).wrap)
    assert seams.apply(first) and seams.apply(second_patch)
    try:
        mine = vars(fake.Inherits)["forward"]
        assert mine.__wrapped__ is stock and vars(fake.Stack)["forward"].__wrapped__ is stock
        fed = []
        stack = fake.Inherits()
        stack._eagle3_capture_feed = lambda model, out, *picked: fed.append(1) or out
        stack.forward("ids", "pos", "fb")
        assert fed == [1]
    finally:
        seams.revert(second_patch)
        seams.revert(first)
    assert fake.Stack.forward is stock and "forward" not in vars(fake.Inherits)


def test_configure_refuses_a_decoder_stack_whose_own_forward_the_table_does_not_list(fake):
    family = _family("fake", ("Stack",))
    patch = target.family_patch(family)
    assert seams.apply(patch)
    try:
        class Unlisted(fake.Stack):  # a subclass with its own forward nobody wrapped
            def forward(self, *args, **kwargs):
                return super().forward(*args, **kwargs)

        model = SimpleNamespace(pp_group=SimpleNamespace(is_last_rank=True, world_size=1), model=Unlisted(),
                                config=SimpleNamespace(num_hidden_layers=6))
        with pytest.raises(DeploymentError, match="Unlisted.*not served by the capture patch of the fake family"):
            fake.CausalLM.set_eagle3_layers_to_capture(model, DeclaredLayerIds([-1, 2], "m.json"))
        model.model = fake.Stack()
        with pytest.raises(DeploymentError, match="the other family"):
            fake.CausalLM.set_eagle3_layers_to_capture(model, DeclaredLayerIds([-1, 2], "m.json", family="other"))
    finally:
        seams.revert(patch)


def test_configure_reads_the_layer_count_from_text_config_where_the_table_says_and_checks_the_stack(fake, monkeypatch):
    monkeypatch.setenv(selfcheck.ENV, "0")  # arming it, and the rank lookup, import SGLang (the in-process tier's)
    monkeypatch.setattr(target, "current_tp_rank", lambda: 0)
    family = replace(_family("fake", ("Stack",)), architectures=("Wrapper",), text_config=("Wrapper",))
    patch = target.family_patch(family)

    class Wrapper:  # a multimodal class: its decoder config is config.text_config
        pass

    def model(cls, n_stack):
        m = cls()
        m.pp_group, m.model = SimpleNamespace(is_last_rank=True, world_size=1), fake.Stack()
        m.model.layers, m.model.norm = [object()] * n_stack, torch.nn.Identity()
        m.config = SimpleNamespace(num_hidden_layers=99, text_config=SimpleNamespace(num_hidden_layers=6))
        return m

    assert seams.apply(patch)
    try:
        wrapper = model(Wrapper, 6)
        fake.CausalLM.set_eagle3_layers_to_capture(wrapper, DeclaredLayerIds([-1, 5, 2], "m.json", family="fake"))
        assert wrapper.model.layers_to_capture == [0, 3]  # 5 = N-1 of text_config's 6 layers: the final norm's
        with pytest.raises(DeploymentError) as e:  # a stack that is not the config's: never a guessed N
            fake.CausalLM.set_eagle3_layers_to_capture(model(Wrapper, 5), DeclaredLayerIds([-1, 2], "m.json"))
        assert (e.value.file, e.value.field) == ("m.json", None)
        own = model(Wrapper, 6)  # a wrapper that keeps the text config as its config (Qwen3.5-VL, qwen3_vl.py:1346)
        own.config = own.config.text_config
        fake.CausalLM.set_eagle3_layers_to_capture(own, DeclaredLayerIds([-1, 5, 2], "m.json", family="fake"))
        assert own.model.layers_to_capture == [0, 3]

        class Plain:  # not in the table's text_config: its own num_hidden_layers (99) is N, which its stack is not
            pass

        with pytest.raises(DeploymentError):
            fake.CausalLM.set_eagle3_layers_to_capture(model(Plain, 6), DeclaredLayerIds([-1, 2], "m.json"))
    finally:
        seams.revert(patch)


# --- the list container ---------------------------------------------------------------------------------------

class _PairNorm(torch.nn.Module):
    def forward(self, x, residual):
        return (x + residual) * 2, x + residual


def test_a_list_is_counted_reordered_and_packed():
    plan = plan_capture([4, -1, 5, 1], 6, where="m.json")  # loop 0, 2, 5; layer 5 = N-1 from the final norm
    stack = SimpleNamespace(layers_to_capture=list(plan.loop_indices), norm=_PairNorm())
    feed = FcFeed(plan, stack.layers_to_capture, None, 6, model_name="LlamaModel")
    feed.attach(stack)
    chunks = [torch.randn(3, 4) for _ in range(3)]  # loop 0, 2, 5 in ascending order, as AuxHiddenStateList has them
    x, residual = torch.randn(3, 4), torch.randn(3, 4)
    hidden, _ = stack.norm(x, residual)
    out = feed(stack, (hidden, list(chunks)), None, None, None)
    assert out[0] is hidden and torch.equal(out[1], torch.cat([chunks[2], chunks[0], x + residual, chunks[1]], -1))
    stack.norm(x, residual)
    stack.norm(x, residual)
    with pytest.raises(CaptureError) as e:
        feed(stack, (hidden, chunks[:2]), None, None, None)  # SGLang's list path never counts: the feed does
    assert e.value.file == "m.json" and "2 of 3" in e.value.problem and e.value.fix
    stack.norm(x, residual)
    with pytest.raises(CaptureError) as e:
        feed(stack, hidden, None, None, None)
    assert "0 of 3" in e.value.problem


def test_the_final_norm_is_hooked_where_the_family_table_names_it():
    plan = plan_capture([-1, "final_norm", 5], 6, where="m.json")
    stack = SimpleNamespace(layers_to_capture=list(plan.loop_indices), final_layernorm=_PairNorm())  # no .norm
    feed = FcFeed(plan, stack.layers_to_capture, None, 6, model_name="Stack", final_norm="final_layernorm")
    feed.attach(stack)
    x, residual, emb = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    hidden, _ = stack.final_layernorm(x, residual)
    out = feed(stack, (hidden, [emb]), None, None, None)
    assert torch.equal(out[1], torch.cat([emb, hidden, x + residual], -1))
    feed.detach()
    assert not stack.final_layernorm._forward_hooks


def test_an_identity_list_is_packed_and_counted_too():
    plan = plan_capture([-1, 1], 6, where="m.json")
    stack = SimpleNamespace(layers_to_capture=list(plan.loop_indices))
    feed = FcFeed(plan, stack.layers_to_capture, None, 6, model_name="Qwen3Model")
    chunks = [torch.randn(2, 4), torch.randn(2, 4)]
    out = feed(stack, (torch.zeros(2, 4), chunks), None, None, None)
    assert torch.equal(out[1], torch.cat(chunks, -1))
    with pytest.raises(CaptureError) as e:
        feed(stack, (torch.zeros(2, 4), chunks[:1]), None, None, None)
    assert e.value.file == "m.json" and "1 of 2" in e.value.problem
