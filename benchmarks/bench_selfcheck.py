"""Startup time the first-batch self-check adds, side by side in one run (SGLANG_EAGLE3_CAPTURE_SELFCHECK on vs off).

Two measurements on the bundled CPU fixture (fixtures/tiny: a 7-layer DeepSeek-V3 target, its EAGLE-3 draft with
manifest [-1, 0, 1]), through the CPU runtime (cpu_runtime/):

- ``servers``: ``python -m sglang.launch_server`` started alternately with the check on and off, time from start
  to "The server is fired up and ready to roll!" (it includes the startup warmup request, the batch the check
  runs on), and the check's own duration from its INFO line (the checked forward, hooks, references, comparison);
- ``inprocess``: SGLang's ModelRunner in this process, the warmup-shaped batch (3 tokens) alternately plain and
  checked (armed, then one prefill through ``ModelRunner.forward``): the paired difference (wall time, and this
  process's CPU time, which other load on the machine disturbs less) is what the check adds; ``arm`` + the gate
  patch timed on their own.

Writes benchmarks/results/selfcheck.json.

    python benchmarks/bench_selfcheck.py                     # 2 rounds of servers, 15 in-process pairs
    python benchmarks/bench_selfcheck.py --server-rounds 0   # in-process only
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "tiny"
WARMUP_IDS = [10, 11, 12]  # what launch_server's warmup request sends with --skip-tokenizer-init


def _setup() -> None:
    """The repository root on the path (``harness``, never shipped), then the CPU runtime as the tests set it up."""
    sys.path.insert(0, str(ROOT))
    import harness

    harness.use_cpu_runtime()


def servers(rounds: int) -> dict:
    """Alternating (on, off) / (off, on) launch_server pairs: time to ready, and the check's own time from its line."""
    from harness.servers import PASSED_RE, Server, server_env

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_selfcheck_") as tmp:
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                env = server_env(SGLANG_EAGLE3_CAPTURE_SELFCHECK="1" if on else "0")
                with Server(FIXTURE / "target", Path(tmp) / f"{r}-{on}.log", draft=FIXTURE / "draft", env=env) as s:
                    if not s.wait(timeout=900):
                        raise RuntimeError(f"server did not start:\n{s.text()[-3000:]}")
                    m = re.search(PASSED_RE, s.text())
                rows.append({"round": r, "selfcheck": on, "ready_s": round(s.ready_s, 2),
                             "checked_forward_ms": float(m.group(1)) if m else None,
                             "check_own_ms": float(m.group(2)) if m else None})
                print(rows[-1], flush=True)
    on = [x["ready_s"] for x in rows if x["selfcheck"]]
    off = [x["ready_s"] for x in rows if not x["selfcheck"]]
    own = [x["check_own_ms"] for x in rows if x["selfcheck"]]
    spread = max(max(on) - min(on), max(off) - min(off))
    return {"runs": rows, "ready_s_median_on": round(statistics.median(on), 2),
            "ready_s_median_off": round(statistics.median(off), 2),
            "ready_s_median_difference": round(statistics.median(on) - statistics.median(off), 2),
            "ready_s_spread_within_one_setting": round(spread, 2),
            "check_own_ms_max": max(own) if all(c is not None for c in own) else None,
            "note": "time to ready includes imports, model load and the warmup request; its spread between runs "
                    "of one setting (machine load) bounds what this comparison resolves; the check's own work "
                    "is measured inside each checked server and reported in its INFO line"}


def inprocess(pairs: int) -> dict:
    import logging

    import torch

    from harness.servers import PASSED_RE
    from harness.sglang_inprocess import get_runner
    from sglang_eagle3_capture.core import families
    from sglang_eagle3_capture.core import selfcheck as check_core
    from sglang_eagle3_capture.core.capture import plan_capture
    from sglang_eagle3_capture.core.sglang import selfcheck
    from sglang_eagle3_capture.core.sglang import target as target_patch
    from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds

    runner = get_runner(FIXTURE / "target")
    n = runner.model.config.num_hidden_layers
    ids = json.loads((FIXTURE / "draft" / "eagle3_manifest.json").read_text())["layer_ids"]
    family = families.family_of("DeepseekV3ForCausalLM")
    stack = runner.model.model
    plan = plan_capture(ids, n, where="bench")
    plain, checked, arm, own, cpu = [], [], [], [], {True: [], False: []}
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger(check_core.__name__).addHandler(handler)  # the pass line is the engine-neutral check's
    logging.getLogger(check_core.__name__).setLevel(logging.INFO)
    with target_patch.patched(), torch.no_grad():
        runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds(ids, "bench"))  # arms a check: run it off
        for _ in range(3):
            runner.prefill([WARMUP_IDS])
        for i in range(pairs):
            for on in ((True, False) if i % 2 == 0 else (False, True)):
                if on:
                    t = time.perf_counter()
                    selfcheck.arm(stack, plan, family, num_hidden_layers=n, where="bench")
                    arm.append(time.perf_counter() - t)
                t, c = time.perf_counter(), time.process_time()
                runner.prefill([WARMUP_IDS])
                (checked if on else plain).append(time.perf_counter() - t)
                cpu[on].append(time.process_time() - c)
                assert selfcheck.pending() == ()
                if on:
                    own.append(float(re.search(PASSED_RE, seen[-1]).group(2)))
        runner.reset_capture()
    diffs = [c - p for c, p in zip(checked, plain)]
    cpu_diffs = [c - p for c, p in zip(cpu[True], cpu[False])]
    return {"pairs": pairs, "tokens": len(WARMUP_IDS), "layer_ids": ids,
            "plain_prefill_ms_median": round(statistics.median(plain) * 1e3, 3),
            "checked_prefill_ms_median": round(statistics.median(checked) * 1e3, 3),
            "added_ms_median_of_pairs": round(statistics.median(diffs) * 1e3, 3),
            "added_ms_max_of_pairs": round(max(diffs) * 1e3, 3),
            "added_cpu_ms_median_of_pairs": round(statistics.median(cpu_diffs) * 1e3, 3),
            "check_own_ms_median": statistics.median(own), "check_own_ms_max": max(own),
            "arm_and_gate_ms_median": round(statistics.median(arm) * 1e3, 3), "torch_threads": torch.get_num_threads()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-rounds", type=int, default=2, help="rounds of (on, off) launch_server pairs")
    ap.add_argument("--pairs", type=int, default=15, help="in-process (plain, checked) prefill pairs")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "selfcheck.json"))
    args = ap.parse_args(argv)
    _setup()
    result = {"bench": "selfcheck_startup", "fixture": "fixtures/tiny", "device": f"cpu ({os.cpu_count()} cores)",
              "sglang_version": metadata.version("sglang"), "date": time.strftime("%Y-%m-%d"),
              "load_average_at_start": os.getloadavg()[0]}
    if args.server_rounds:
        result["servers"] = servers(args.server_rounds)
    result["inprocess"] = inprocess(args.pairs)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
