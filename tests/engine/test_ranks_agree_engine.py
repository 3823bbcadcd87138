"""The tensor-parallel ranks prove they serve the same manifest (core/ranks.py, core/sglang/target.py ranks_agree).

Over SGLang's own TP CPU group (two processes joined by SGLang's parallel runtime, as its scheduler processes are;
support/ranks_side.py), each rank reading the draft's manifest on its own: unchanged, both pass; the manifest's layer
ids rewritten between the two reads, or the manifest removed between them (stock wiring on one rank), both ranks
refuse with the same error naming the manifest and its field.

The same through a real TP 2 start (the manifest rewritten between the ranks' reads, refused at startup) is
test_plugin_engine.py's, in its one subprocess; its TP 2 start without the edit serves with both ranks passing.
"""

import json

from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, Manifest, write_manifest
from support.ranks_side import run_ranks
from support.tiny_models import build_tiny_draft

IDS, EDITED = [5, -1, 1], [-1, 1, 5]  # the same three layers in another fc order: a silent rewiring


def _draft(path, target_dir):
    draft = build_tiny_draft(path, target_dir=target_dir, num_aux=len(IDS))
    write_manifest(draft, Manifest(tuple(IDS), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    return draft


def test_the_ranks_compare_what_they_serve_over_sglangs_tp_cpu_group(tmp_path, tiny_target_dir):
    draft = _draft(tmp_path / "draft", tiny_target_dir)
    manifest = draft / MANIFEST_FILENAME
    original = manifest.read_text()

    def edit(case):  # between rank 0's read and rank 1's
        if case == "edited between the reads":
            doc = json.loads(original)
            manifest.write_text(json.dumps({**doc, "layer_ids": EDITED}))
        elif case == "removed between the reads":
            manifest.unlink()

    cases = ["unchanged", "edited between the reads", "removed between the reads"]
    results = run_ranks(draft, cases, lambda case: manifest.write_text(original), edit)
    assert results["unchanged"] == [("passed",), ("passed",)]
    for case in cases[1:]:
        refused = results[case]
        assert [r[0] for r in refused] == ["refused", "refused"], (case, refused)
        assert refused[0] == refused[1]  # every rank refuses with the same error
        _, file, field, problem = refused[0]
        assert (file, field) == (str(manifest), "layer_ids"), (case, refused[0])
        assert f"rank 0: layer ids {IDS}" in problem and "rank 1: " in problem
