"""The tensor-parallel ranks prove they serve the same manifest (core/ranks.py, core/sglang/target.py ranks_agree).

1. Over SGLang's own TP CPU group (two processes joined by SGLang's parallel runtime, as its scheduler processes
   are; support/ranks_side.py), each rank reading the draft's manifest on its own: unchanged, both pass; the
   manifest's layer ids rewritten between the two reads, or the manifest removed between them (stock wiring on one
   rank), both ranks refuse with the same error naming the manifest and its field.
2. A real TP 2 start on CPU (``sglang.Engine``, the plugin as installed), a start-up hook
   (support/selfcheck_site/) rewriting the manifest's layer ids after TP rank 0 read it and before rank 1 does: the
   start is refused before the server serves, naming the manifest and both ranks' ids; the same start without the
   edit serves and both ranks pass the self-check (the hook is loaded in both).
"""

import json
import os
import shutil

from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, Manifest, write_manifest
from support import subprocess_env
from support.engine_harness import engine_run, greedy, run_engines
from support.ranks_side import run_ranks
from support.servers import SELFCHECK_SITE
from support.tiny_models import build_tiny_draft

IDS, EDITED = [5, -1, 1], [-1, 1, 5]  # the same three layers in another fc order: a silent rewiring
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
PASSED = "eagle3-capture self-check passed"


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


def test_a_manifest_edited_between_the_ranks_reads_refuses_the_tp2_start(tmp_path, tiny_target_dir):
    edited, control = _draft(tmp_path / "edited", tiny_target_dir), tmp_path / "control"
    shutil.copytree(edited, control)
    markers = tmp_path / "markers"
    markers.mkdir()
    base = subprocess_env()
    env = {"PYTHONPATH": os.pathsep.join([str(SELFCHECK_SITE), base["PYTHONPATH"]]),
           "SGLANG_CPU_OMP_THREADS_BIND": "0|1",  # SGLang's CPU path asserts ranks <= NUMA nodes otherwise
           "SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS": "0"}
    kwargs = {"log_level": "info", "tp_size": 2}
    runs = [engine_run(tiny_target_dir, PROMPTS, draft_path=edited, sampling_params=greedy(4), engine_kwargs=kwargs,
                       env={"EAGLE3_TEST_EDIT_MANIFEST": json.dumps(EDITED), "EAGLE3_TEST_MARKERS": str(markers)},
                       fails="start"),
            engine_run(tiny_target_dir, PROMPTS, draft_path=control, sampling_params=greedy(4), engine_kwargs=kwargs)]
    refused, served = run_engines(runs, plugins="eagle3_capture", env=env, timeout=1500)
    log = refused["log"]
    assert "TEST EDIT: TP rank 1 rewrote" in log, log[-4000:]
    line = next((x for x in log.splitlines() if "tensor-parallel ranks do not serve the same draft wiring" in x), None)
    assert line is not None, log[-4000:]
    assert f"{edited / MANIFEST_FILENAME}: field 'layer_ids': " in line and "DeploymentError" in log
    assert f"rank 0: layer ids {IDS}" in line and f"rank 1: layer ids {EDITED}" in line
    assert PASSED not in log
    # the same start, the hook loaded, nothing edited: served, every rank's self-check passed
    assert len(served["outputs"]) == len(PROMPTS)
    assert sorted(x[x.index("tp_rank"):x.index(",", x.index("tp_rank"))] for x in served["log"].splitlines()
                  if PASSED in x) == ["tp_rank 0", "tp_rank 1"]
