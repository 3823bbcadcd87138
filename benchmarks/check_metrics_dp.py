"""The acceptance metrics under data parallelism on CPU, one server, the tiny DeepSeek fixture:

- ``--mode dp-size`` (``--dp-size 2``: two replicas behind SGLang's DP controller), writes
  benchmarks/results/metrics_dp2.json;
- ``--mode dp-attention`` (``--tp-size 2 --dp-size 2 --enable-dp-attention``: two attention-DP groups of one rank
  each inside one TP group of two; needs the CPU runtime's B9), writes benchmarks/results/metrics_dp_attention.json.

Each stats-logging scheduler (attention TP rank 0 of its group) counts its own requests in series labelled as SGLang
labels its own; summed, the counters must equal the responses' own ``spec_verify_ct`` / ``spec_num_correct_drafts``
and SGLang's ``sglang:spec_verify_calls_total``, and greedy output must equal a server without speculation. Not in
the suite (each is one more multi-process server start in CI).

    python benchmarks/check_metrics_dp.py --mode dp-attention
"""
import argparse
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
P = "sglang_eagle3_capture:draft_position_proposed_total"
A = "sglang_eagle3_capture:draft_position_accepted_total"
MODES = {  # mode: (extra server arguments, result file)
    "dp-size": (["--dp-size", "2"], "metrics_dp2.json"),
    "dp-attention": (["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention"], "metrics_dp_attention.json"),
}


def scrape(port):
    time.sleep(2)  # two flushes of the plugin's exporter
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        return r.read().decode()


def series(text, name):
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def serve(prompts, log, extra, draft):
    env = server_env(SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0", SGLANG_CPU_OMP_THREADS_BIND="0|1")
    with Server(TINY / "target", log, draft=draft, env=env,
                extra_args=["--enable-metrics", "--mem-fraction-static", "0.1", *extra]) as s:
        assert s.wait(timeout=900), s.text()[-3000:]
        before = scrape(s.port)
        outs = [s.generate(p, max_new_tokens=48) for p in prompts]
        return before, scrape(s.port), outs, s.text()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=sorted(MODES), default="dp-size")
    ap.add_argument("--prompts", type=int, default=24)
    args = ap.parse_args()
    extra, out_name = MODES[args.mode]
    prompts = json.loads((TINY / "prompts.json").read_text())[:args.prompts]
    _, _, plain, _ = serve(prompts, f"/tmp/metrics-{args.mode}-plain.log", extra, None)
    before, after, outs, text = serve(prompts, f"/tmp/metrics-{args.mode}-server.log", extra, TINY / "draft")
    meta = [o["meta_info"] for o in outs]
    prop = sum(v for _, v in series(after, P)) - sum(v for _, v in series(before, P))
    acc = sum(v for _, v in series(after, A)) - sum(v for _, v in series(before, A))
    label_sets = sorted({tuple(sorted((k, v) for k, v in lab.items() if k != "position")) for lab, _ in
                         series(after, P)})
    sg = sum(v for _, v in series(after, "sglang:spec_verify_calls_total"))
    result = {"mode": args.mode, "server_args": extra, "prompts": len(prompts),
              "verify_steps_responses": sum(m["spec_verify_ct"] for m in meta), "proposed_counter_delta": prop,
              "correct_drafts_responses": sum(m["spec_num_correct_drafts"] for m in meta),
              "accepted_counter_delta": acc, "series_labels": [dict(x) for x in label_sets],
              "sglang_spec_verify_calls_total": sg, "proposed_total_all": sum(v for _, v in series(after, P)),
              "counting_schedulers": text.count("counting per-position acceptance in this scheduler"),
              "greedy_equal_to_no_speculation": [o["output_ids"] for o in outs] == [o["output_ids"] for o in plain]}
    result["ok"] = (prop == result["verify_steps_responses"] and acc == result["correct_drafts_responses"]
                    and result["counting_schedulers"] == 2 and sg == result["proposed_total_all"]
                    and result["greedy_equal_to_no_speculation"])
    (ROOT / "benchmarks" / "results" / out_name).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
