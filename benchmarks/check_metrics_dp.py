"""The acceptance metrics under ``--dp-size 2`` (two replicas behind SGLang's DP controller) on CPU, one server: each
replica's stats-logging scheduler counts its own requests in series labelled ``dp_rank``; summed, the counters equal
the responses' own ``spec_verify_ct`` / ``spec_num_correct_drafts`` and SGLang's ``sglang:spec_verify_calls_total``.
Not in the suite (one more server start in CI); writes benchmarks/results/metrics_dp2.json.

    python benchmarks/check_metrics_dp.py
"""
import json
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "cpu_runtime"))
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from fixtures.specs import SPECS  # noqa: E402
from harness.servers import Server, server_env  # noqa: E402

TINY = SPECS["tiny"].directory
def scrape(port):
    time.sleep(2)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        return r.read().decode()
def series(text, name):
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]
env = server_env(SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0", SGLANG_CPU_OMP_THREADS_BIND="0|1")
prompts = json.loads((TINY / "prompts.json").read_text())[:24]
with Server(TINY / "target", "/tmp/metrics-dp2-server.log", draft=TINY / "draft", env=env,
            extra_args=["--enable-metrics", "--dp-size", "2", "--mem-fraction-static", "0.1"]) as s:
    assert s.wait(timeout=900), s.text()[-3000:]
    before = scrape(s.port)
    outs = [s.generate(p, max_new_tokens=48)["meta_info"] for p in prompts]
    after = scrape(s.port)
    text = s.text()
P = "sglang_eagle3_capture:draft_position_proposed_total"
A = "sglang_eagle3_capture:draft_position_accepted_total"
prop = sum(v for _, v in series(after, P)) - sum(v for _, v in series(before, P))
acc = sum(v for _, v in series(after, A)) - sum(v for _, v in series(before, A))
verify = sum(m["spec_verify_ct"] for m in outs)
correct = sum(m["spec_num_correct_drafts"] for m in outs)
ranks = sorted({lab.get("dp_rank") for lab, _ in series(after, P)})
per_rank = {r: sum(v for lab, v in series(after, P) if lab.get("dp_rank") == r) for r in ranks}
sg = sum(v for _, v in series(after, "sglang:spec_verify_calls_total"))
result = {"dp_size": 2, "prompts": len(prompts), "verify_steps_responses": verify, "proposed_counter_delta": prop,
          "correct_drafts_responses": correct, "accepted_counter_delta": acc, "dp_rank_series": ranks,
          "proposed_per_dp_rank_total": per_rank, "sglang_spec_verify_calls_total": sg,
          "proposed_total_all": sum(v for _, v in series(after, P)),
          "counting_schedulers": text.count("counting per-position acceptance in this scheduler")}
result["ok"] = prop == verify and acc == correct and ranks == ["0", "1"] and sg == result["proposed_total_all"]
(ROOT / "benchmarks" / "results" / "metrics_dp2.json").write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps(result, indent=2))
sys.exit(0 if result["ok"] else 1)
