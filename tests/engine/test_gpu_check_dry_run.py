"""benchmarks/gpu_check.py --dry-run: the one-command GPU check's plumbing on CPU (its CUDA-only steps skipped with
the reason), end to end: the stand-in stage, one SGLang case with the self-check and the dump against HF, and both
benchmarks reduced. About 4 minutes on the 2-core CI machine, so make test-extended's (marker ``extended``): every
property its stages show on CPU has its own test in make test (the self-check, the dump against HF, the benchmarks'
plumbing); what only this shows is that the GPU check script itself runs end to end, which matters when a GPU is lent
and the script changes (benchmarks/gpu_check.py, docs/gpu-check.md).
"""

import json
import subprocess
import sys

import pytest

from support import REPO, subprocess_env

pytestmark = pytest.mark.extended


def test_the_dry_run_runs_every_stage_and_skips_only_cuda(tmp_path):
    out = tmp_path / "gpu"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out),
                           "--budget-s", "1200"], env=subprocess_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["dry_run"] and doc["all_ok"] and doc["device"].startswith("cpu")
    items = {(i["stage"], i["item"]): i for i in doc["items"]}
    skipped = {k for k, i in items.items() if i["status"] == "skipped"}
    assert skipped == {("standin", "not_run_during_graph_capture"), ("standin", "torch_compile_unaffected"),
                       ("sglang", "cuda_graphs_tree_torch_compile")}
    assert all("CUDA" in items[k]["details"] for k in skipped)
    case = items[("sglang", "chain (CPU runtime shape)")]["details"]
    assert case["selfcheck_info_lines"] == 1 and "max|diff| 0 (" in case["selfcheck_line"]
    assert case["dump_vs_hf"]["prompt_rows_compared"] >= 4 and case["dump_vs_hf"]["wrong"] == []
    assert case["accept_length"] > 1.0
    (e2e,) = items[("bench", "e2e")]["details"]  # the dry run starts the manifest server only
    assert e2e["variant"] == "manifest" and e2e["accept_length"] > 1.5 and e2e["output_tok_per_s"] > 0
    assert all(r["ratio_p50"] > 0 for r in items[("bench", "capture_overhead")]["details"])
    assert (out / "summary.md").read_text().startswith("# GPU check on cpu")
