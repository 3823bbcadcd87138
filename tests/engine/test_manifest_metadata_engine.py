"""A manifest whose provenance holds what this version would not write (a key a later version adds, a tab in the
note) still serves through ``sglang.Engine`` with the plugin: provenance is metadata (core/schemas/manifest.py), never a
reason to stop SGLang. Before issue 17 the manifest reader refused both, and the server did not start."""

import json
import shutil

import pytest

from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME
from support.engine_harness import greedy, run_engine
from support.fixture import fixture_dir

pytestmark = pytest.mark.engine

PROMPT = [5, 6, 7, 8, 9, 10]
NEW_TOKENS = 4


def test_a_manifest_with_unknown_provenance_and_a_tab_in_its_note_serves(tmp_path):
    fx = fixture_dir()
    draft = tmp_path / "draft"
    shutil.copytree(fx / "draft", draft)
    doc = json.loads((draft / MANIFEST_FILENAME).read_text())
    doc["provenance"].update(note="trained\tby hand", added_by_a_later_version={"run": 7})
    (draft / MANIFEST_FILENAME).write_text(json.dumps(doc))

    dump = tmp_path / "dump"
    result = run_engine(fx / "target", [PROMPT], draft_path=draft, plugins="eagle3_capture",
                        sampling_params=greedy(NEW_TOKENS), env={"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump)})
    out = result["outputs"][0]
    assert len(out["output_ids"]) == NEW_TOKENS and out["meta_info"]["spec_verify_ct"] > 0  # EAGLE-3 ran
    metas = [json.loads(p.read_text()) for p in sorted(dump.glob("*.json"))]
    assert metas and all(m["layer_ids"] == doc["layer_ids"] for m in metas)  # wired from this manifest
