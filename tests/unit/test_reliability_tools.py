"""Issue 28, round 3: this package's own tools never rewire a draft silently, and errors about a draft config name
the file (table-driven, over every tool and reader each class applies to).

1. Whatever ``convert`` and ``manifest write --fail-closed`` write, the server's own functions (the launch reading
   and policy of core/launch.py and core/policy.py, the draft loader's checks) serve exactly what the source stated
   (its manifest, else its marked ids, else the ids written), every supported stock SGLang feeds exactly that or
   refuses at startup, and the value the user's config held survives every rewrite in ``provenance.fail_closed``.
2. Every command and reader that reports on a draft config names the config's path (never a placeholder).
3. The launch checks the server and ``inspect`` share refuse draft chains SGLang accepts but cannot run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sglang_eagle3_capture.core import launch, policy, releases
from sglang_eagle3_capture.core.config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION
from sglang_eagle3_capture.core.errors import DeploymentError, Eagle3CaptureError, InputError
from sglang_eagle3_capture.core.families import family_of
from sglang_eagle3_capture.core.layer_ids import FINAL_NORM
from sglang_eagle3_capture.core.manifest import (
    MANIFEST_FILENAME,
    Manifest,
    find_manifest,
    read_manifest,
    write_manifest,
)
from sglang_eagle3_capture.core.stock import stock_sglang_capture
from sglang_eagle3_capture.doctor import release_table
from sglang_eagle3_capture.doctor.convert import convert
from sglang_eagle3_capture.doctor.inspect import inspect_draft
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from sglang_eagle3_capture.doctor.verify import verify
from support.speculators_drafts import build_specforge_draft, build_speculators_draft, write_target

N = 61  # the targets of support/speculators_drafts.py
DSV3, KIMI = "DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"


def _mark(draft: Path) -> Path:
    cfg = json.loads((draft / "config.json").read_text())
    cfg["eagle_config"][CONVENTION_KEY] = LAYER_ID_CONVENTION
    (draft / "config.json").write_text(json.dumps(cfg))
    return draft


def _ids(draft: Path):
    return json.loads((draft / "config.json").read_text())["eagle_config"][IDS_KEY]


# ---- 1. no silent rewiring by the package's own tools --------------------------------------------------------------
# Each case builds SRC, runs the tool, and returns (the draft it wrote, its target, what SRC stated, the ids value the
# user's config held before the package first rewrote it, or None when no rewrite is expected to be recorded).

def _speculators_with_final_norm_manifest(tmp):
    """The issue's example: a speculators draft whose manifest names final_norm, where its config reads N-1."""
    src, target = build_speculators_draft(tmp / "src"), write_target(tmp / "kimi")
    write_manifest(src, Manifest((-1, 2, FINAL_NORM), KIMI, N, 64, {"source": "manual", "note": "trained on it"}))
    convert(src, tmp / "dst", target=target)
    return tmp / "dst", target, (-1, 2, FINAL_NORM), None


def _sglang_format_with_manifest(tmp):
    src, target = build_specforge_draft(tmp / "src", ids=(1, 29, 57)), write_target(tmp / "dsv3", architecture=DSV3)
    write_manifest(src, Manifest((0, 28, 56), DSV3, N, 64, {"source": "verify"}))  # config reads (1, 29, 57)
    convert(src, tmp / "dst", target=target)
    return tmp / "dst", target, (0, 28, 56), None


def _sglang_format_marked(ids):
    def case(tmp):
        src = _mark(build_specforge_draft(tmp / "src", ids=ids))
        target = write_target(tmp / "dsv3", architecture=DSV3)
        convert(src, tmp / "dst", target=target)
        return tmp / "dst", target, ids, None
    return case


def _manifest_write_fail_closed_on_marked_ids(tmp):
    draft = _mark(build_specforge_draft(tmp / "d", ids=(5, 6, 7)))
    target = write_target(tmp / "dsv3", architecture=DSV3)
    write_draft_manifest(draft, [-1, 2, 30], target, fail_closed=True)
    return draft, target, (-1, 2, 30), [5, 6, 7]


def _manifest_write_fail_closed_twice(second):
    def case(tmp):
        draft = build_specforge_draft(tmp / "d", ids=(1, 29, 57))
        target = write_target(tmp / "dsv3", architecture=DSV3)
        write_draft_manifest(draft, [2, 30, 60], target, fail_closed=True)  # layer 60: the fail-closed object
        write_draft_manifest(draft, list(second), target, force=True, fail_closed=True)
        return draft, target, second, [1, 29, 57]
    return case


def _convert_after_manifest_write_fail_closed(tmp):
    src = build_specforge_draft(tmp / "src", ids=(1, 29, 57))
    target = write_target(tmp / "dsv3", architecture=DSV3)
    write_draft_manifest(src, [2, 30, 60], target, fail_closed=True)
    convert(src, tmp / "dst", target=target)
    return tmp / "dst", target, (2, 30, 60), [1, 29, 57]


TOOL_CASES = {
    "convert: speculators draft with a manifest naming final_norm": _speculators_with_final_norm_manifest,
    "convert: SGLang-format draft with a manifest other than its config": _sglang_format_with_manifest,
    "convert: SGLang-format draft with marked ids stock SGLang can be told": _sglang_format_marked((-1, 2, 30)),
    "convert: SGLang-format draft with marked ids past the loop": _sglang_format_marked((2, 30, 60)),
    "manifest write --fail-closed: a config with marked ids": _manifest_write_fail_closed_on_marked_ids,
    "manifest write --force --fail-closed twice, the same ids": _manifest_write_fail_closed_twice((2, 30, 60)),
    "manifest write --force --fail-closed twice, other ids": _manifest_write_fail_closed_twice((-1, 2, 30)),
    "convert of a draft manifest write --fail-closed made": _convert_after_manifest_write_fail_closed,
}


def served_by_plugin(draft: Path, target: Path, release) -> tuple:
    """The ids the plugin's server code wires for ``draft`` (its launch reading and policy, then its draft loader's
    checks), on the default EAGLE3 launch."""
    cfg = json.loads((draft / "config.json").read_text())
    manifest = find_manifest(draft)
    d = launch.deployment(None, release=release, draft_path=str(draft), manifest=manifest, draft_config=cfg,
                          target_config=json.loads((target / "config.json").read_text()))
    decision = policy.decide(d)
    launch.check_draft(cfg, str(draft), manifest, mla=launch.draft_class(cfg, release) == "mla")
    return decision.layer_ids


@pytest.mark.parametrize("case", TOOL_CASES)
def test_what_the_tools_write_is_served_as_the_source_stated(tmp_path, case):
    draft, target, stated, original = TOOL_CASES[case](tmp_path)
    assert served_by_plugin(draft, target, releases.installed_or_newest()) == tuple(stated)
    cfg = json.loads((draft / "config.json").read_text())
    family = family_of(json.loads((target / "config.json").read_text())["architectures"][0])
    for release in release_table.all_releases():
        if release.supported:  # without the plugin: exactly the statement, or no server at all
            c = stock_sglang_capture(cfg, N, family=family, release=release)
            assert c.refuses_at_startup or (c.fed_layer_ids == tuple(stated) and not c.problem and not c.mis_fed), \
                (release.version, c.describe())
    record = read_manifest(draft).provenance.get("fail_closed") or {}
    if original is not None:
        assert original in (record.get("replaced_value"), record.get("source_value")), record


def test_convert_carries_the_source_manifest_with_its_provenance(tmp_path):
    dst, _, _, _ = _speculators_with_final_norm_manifest(tmp_path)
    src_m, dst_m = read_manifest(tmp_path / "src"), read_manifest(dst)
    assert dst_m.layer_ids == src_m.layer_ids
    assert {k: dst_m.provenance[k] for k in src_m.provenance} == src_m.provenance  # kept, not rebuilt
    assert dst_m.provenance["carried_from"] == str((tmp_path / "src" / MANIFEST_FILENAME).resolve())


def test_convert_refuses_layer_ids_that_contradict_the_source_manifest(tmp_path):
    src = build_specforge_draft(tmp_path / "src", ids=(1, 29, 57))
    target = write_target(tmp_path / "dsv3", architecture=DSV3)
    write_manifest(src, Manifest((0, 28, 56), DSV3, N, 64, {"source": "verify"}))
    with pytest.raises(InputError) as e:
        convert(src, tmp_path / "dst", target=target, layer_ids=[1, 29, 57])
    assert (e.value.file, e.value.field) == (str(src / MANIFEST_FILENAME), "layer_ids")
    assert not (tmp_path / "dst").exists()
    report = convert(src, tmp_path / "dst", target=target, layer_ids=[0, 28, 56])  # the same ids: carried
    assert read_manifest(report.dst).layer_ids == (0, 28, 56)


def test_the_marker_never_stands_beside_written_capture_ids(tmp_path):
    """A marked id list becomes capture-loop indices: the mark that says 'layer ids' goes (the bug: kept)."""
    dst, *_ = _sglang_format_marked((-1, 2, 30))(tmp_path)
    ec = json.loads((dst / "config.json").read_text())["eagle_config"]
    assert CONVENTION_KEY not in ec and ec[IDS_KEY] == [0, 3, 31]


def test_without_the_fix_the_marked_output_would_be_refused(tmp_path):
    """The property above can fail: a converted config that kept the mark is refused by the plugin's policy."""
    dst, target, _, _ = _sglang_format_marked((-1, 2, 30))(tmp_path)
    _mark(dst)
    with pytest.raises(DeploymentError) as e:
        served_by_plugin(dst, target, releases.installed_or_newest())
    assert e.value.field == "layer_ids"


# ---- 2. errors about a draft config name its file -------------------------------------------------------------------

TINY = Path(__file__).resolve().parents[2] / "fixtures" / "tiny"

BAD_CONFIGS = {  # name -> (edit, the field each reader names)
    "eagle_config ids not integers": (lambda c: c["eagle_config"].update({IDS_KEY: ["a", "b", "c"]}),
                                      f"eagle_config.{IDS_KEY}"),
    "a math flag not a boolean": (lambda c: c.update(norm_before_fc="yes"), "norm_before_fc"),
    "use_aux_hidden_state not a boolean": (lambda c: c["eagle_config"].update(use_aux_hidden_state="no"),
                                           "eagle_config.use_aux_hidden_state"),
}


def _server(draft: Path) -> None:
    served_by_plugin(draft, TINY / "target", releases.installed_or_newest())


def _inspect(draft: Path) -> None:
    r = inspect_draft(draft, TINY / "target")
    if r.refusal is not None:
        raise Eagle3CaptureError(r.refusal["file"], r.refusal["field"], r.refusal["problem"], r.refusal["fix"])


READERS = {
    "the server (policy and draft loader)": _server,
    "inspect": _inspect,
    "manifest write --fail-closed": lambda d: write_draft_manifest(d, [-1, 0, 1], TINY / "target", force=True,
                                                                   fail_closed=True),
    "convert": lambda d: convert(d, d.parent / "out", target=TINY / "target"),
    "verify": lambda d: verify(d, [TINY / "samples" / "data_0.pt"], target=TINY / "target", progress=False),
}


# manifest write does not read the math flags (nothing it writes depends on them): not a case for it
NAMING_CASES = [(reader, bad) for reader in READERS for bad in BAD_CONFIGS
                if (reader, bad) != ("manifest write --fail-closed", "a math flag not a boolean")]


@pytest.mark.parametrize(("reader", "bad"), NAMING_CASES)
def test_every_reader_names_the_draft_config_file(tmp_path, reader, bad):
    draft = tmp_path / "draft"
    shutil.copytree(TINY / "draft", draft)
    cfg = json.loads((draft / "config.json").read_text())
    edit, field = BAD_CONFIGS[bad]
    edit(cfg)
    (draft / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(Eagle3CaptureError) as e:
        READERS[reader](draft)
    assert e.value.file == str(draft / "config.json")
    assert e.value.field.split("[")[0] == field


def test_a_draft_that_is_not_a_local_directory_is_named_by_its_path():
    """The server's draft loader on a hub draft (no local files): its config is named by the path it was given."""
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "norm_before_fc": "yes",
           "eagle_config": {"use_aux_hidden_state": True}}
    with pytest.raises(Eagle3CaptureError) as e:
        launch.check_draft(cfg, "org/some-draft", None, mla=False)
    assert (e.value.file, e.value.field) == (str(Path("org/some-draft") / "config.json"), "norm_before_fc")
    d = policy.Deployment(release=releases.newest(), draft="org/some-draft",
                          eagle_config={IDS_KEY: ["x"]}, architecture=DSV3, num_hidden_layers=N)
    with pytest.raises(Eagle3CaptureError) as e:
        policy.decide(d)
    assert e.value.file == str(Path("org/some-draft") / "config.json")


# ---- 3. draft chains SGLang accepts but cannot run ------------------------------------------------------------------

CHAINS = [  # (steps, topk, draft tokens, the flag refused or None)
    (1, 1, 2, None),
    (3, 1, 4, None),
    (3, 4, 8, None),
    (2, 2, 7, None),  # 2 + 1 * 4 = 6 candidates: 6 picked, the most
    (2, 2, 8, "--speculative-num-draft-tokens"),
    (1, 8, 10, "--speculative-num-draft-tokens"),  # one step of topk 8: 8 candidates
    (-1, 1, 0, "--speculative-num-steps"),
    (0, 1, 1, "--speculative-num-steps"),
    (1, 0, 2, "--speculative-eagle-topk"),
    (1, 1, 0, "--speculative-num-draft-tokens"),
]


@pytest.mark.parametrize("steps, topk, tokens, refused", CHAINS)
@pytest.mark.parametrize("algorithm", ["EAGLE3", "EAGLE", "STANDALONE"])
def test_the_shared_launch_check_refuses_chains_the_eagle_worker_cannot_run(steps, topk, tokens, refused, algorithm):
    chain = launch.Launch(algorithm, num_steps=steps, eagle_topk=topk, num_draft_tokens=tokens)
    if refused is None:
        launch.check_launch(chain)
        return
    with pytest.raises(DeploymentError) as e:
        launch.check_launch(chain)
    assert (e.value.file, e.value.field) == (None, refused)


def test_a_launch_without_an_eagle_worker_is_not_the_chain_checks_business():
    launch.check_launch(launch.Launch("NONE", num_steps=-1, eagle_topk=0, num_draft_tokens=0))
    launch.check_launch(launch.Launch("NGRAM", num_steps=-1, eagle_topk=0, num_draft_tokens=0))
