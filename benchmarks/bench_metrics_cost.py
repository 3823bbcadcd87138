"""What the acceptance metrics (observe/metrics.py) cost per verify step, side by side in one run.

SGLang calls ``Req.update_spec_correct_drafts_histogram`` once per request per verify step; the plugin's wrapper adds
the counting (a lock, integer adds, the alarm's window) after it. This times SGLang's own method alone and wrapped,
in alternating blocks in this process, with the Prometheus exporter live in multi-process mode (a temporary
``PROMETHEUS_MULTIPROC_DIR``, its flush thread running) and an armed alarm, at 3 draft positions. Reported: ns per
call off and on, the ratio, and the added time per verify step of a batch of 64 requests.

Writes benchmarks/results/metrics_cost.json.

    python benchmarks/bench_metrics_cost.py [--calls 100000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "metrics_cost.json"
STEPS = 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100_000, help="calls per block")
    ap.add_argument("--rounds", type=int, default=7, help="off/on block pairs")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="metrics-cost-")  # before prometheus_client
    sys.path.insert(0, str(ROOT))
    from sglang.srt.managers.schedule_batch import Req

    from sglang_eagle3_capture.observe import metrics

    original = Req.update_spec_correct_drafts_histogram
    req = object.__new__(Req)  # only the histogram attribute is used
    req.spec_correct_drafts_histogram = []
    pattern = [3, 2, 3, 0, 1, 3, 3, 2]  # accepted drafts per step, cycled

    def block(fn) -> float:
        req.spec_correct_drafts_histogram = []
        n = len(pattern)
        t0 = time.perf_counter_ns()
        for i in range(args.calls):
            fn(req, pattern[i % n])
        return (time.perf_counter_ns() - t0) / args.calls

    metrics.apply()
    wrapped = Req.update_spec_correct_drafts_histogram
    scheduler = SimpleNamespace(
        metrics_collector_context=SimpleNamespace(is_stats_logging_rank=True, enable_metrics=True,
                                                  collector=SimpleNamespace(labels={"model_name": "bench",
                                                                                    "tp_rank": 0})),
        server_args=SimpleNamespace(speculative_algorithm="EAGLE3", speculative_num_steps=STEPS,
                                    speculative_eagle_topk=1, speculative_num_draft_tokens=STEPS + 1,
                                    speculative_draft_model_path=str(ROOT / "fixtures" / "tiny" / "draft"),
                                    model_path="bench", _resolved_overrides=[]))
    metrics.draft_model_path = lambda server_args: server_args.speculative_draft_model_path
    metrics._after_init(scheduler)
    counter = metrics._COUNTER
    counter._expected = lambda topk: ([0.9, 0.8, 0.7], "")  # an armed alarm, as with an expected block
    wrapped(req, 1)  # builds the exporter and starts the flush thread
    off, on = [], []
    for _ in range(args.rounds):
        off.append(block(original))
        on.append(block(wrapped))
    metrics.flush()
    off_ns, on_ns = statistics.median(off), statistics.median(on)
    result = {
        "what": "Req.update_spec_correct_drafts_histogram alone (off) and with the plugin's counting (on)",
        "calls_per_block": args.calls, "rounds": args.rounds, "draft_positions": STEPS,
        "off_ns_per_call": round(off_ns, 1), "on_ns_per_call": round(on_ns, 1),
        "ratio_on_off": round(on_ns / off_ns, 3),
        "added_us_per_verify_step_batch_64": round((on_ns - off_ns) * 64 / 1000, 2),
        "blocks_off_ns": [round(x, 1) for x in off], "blocks_on_ns": [round(x, 1) for x in on],
        "counted_verify_steps": counter.tally.verify_steps,
        "environment": {"python": platform.python_version(), "machine": platform.machine(),
                        "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if not k.startswith("blocks")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
