"""Cost of the manifest capture itself: target forward time, manifest capture vs stock capture.

Both variants capture the same number of layers on the same SGLang model in one process:
  stock     plugin not applied; stock `set_eagle3_layers_to_capture` given the same layers as
            ascending loop indices (first index 0, so 0.5.23 applies no +1; no reordering);
  manifest  plugin applied; the manifest's ids through the patched path, which also permutes
            the chunks into manifest order.
Two manifests by default: [N-3, -1, 1] (the embedding included, not ascending) and [N-1, -1, 1]
(the last layer's output, taken by the plugin's hook on the final norm and concatenated). Stock
SGLang cannot reach the last layer's output (loop index N), so its baseline for N-1 captures loop
index N-1 instead: the same number of chunks, one layer earlier.
Rounds alternate stock/manifest so machine noise hits both alike; the result is the ratio of
medians (and p20/p80) measured side by side in this run, one row per manifest.

CPU mode runs SGLang's real DeepSeek-V3 in-process with the test-only CPU runtime (cpu_runtime/);
`--device cuda` runs the same on a GPU without the shim (CUDA graphs are not used: this times
`model.forward` on one prefill batch).

Writes benchmarks/results/capture_overhead.json and .csv.

Example::

    python benchmarks/bench_capture_overhead.py --rounds 30
    python benchmarks/bench_capture_overhead.py --target fixtures/tiny/target --ids=-1,4,1 --ids=6,-1 --tokens 2048
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _quantiles(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=10)
    return {"p50": statistics.median(xs), "p20": q[1], "p80": q[7]}


def _measure(runner, patch, declared_ids, ids: list[int], stock_loop: list[int], prompts, rounds: int) -> dict:
    """Alternating rounds of stock capture of ``stock_loop`` and the plugin's capture of ``ids``; one result row."""

    def stock():
        patch.revert()
        runner.reset_capture()
        runner.model.set_eagle3_layers_to_capture(stock_loop)

    def manifest():
        patch.apply()
        runner.reset_capture()
        runner.model.set_eagle3_layers_to_capture(declared_ids(ids, "bench manifest"))

    times: dict[str, list[float]] = {"stock": [], "manifest": []}
    shapes = {}
    for r in range(rounds + 2):  # two warm-up rounds, not recorded
        for name, configure in ((("stock", stock), ("manifest", manifest)) if r % 2 == 0
                                else (("manifest", manifest), ("stock", stock))):
            configure()
            t0 = time.perf_counter()
            out = runner.prefill(prompts)
            dt = time.perf_counter() - t0
            shapes[name] = list(out.aux.shape)
            if r >= 2:
                times[name].append(dt)
    patch.revert()
    runner.reset_capture()
    if shapes["stock"] != shapes["manifest"]:
        raise RuntimeError(f"stock captured {shapes['stock']}, manifest {shapes['manifest']}: not the same work")
    q = {k: _quantiles(v) for k, v in times.items()}
    ratios = [m / s for m, s in zip(times["manifest"], times["stock"])]
    return {
        "bench": "capture_overhead", "tokens": sum(map(len, prompts)), "rounds": rounds, "manifest_ids": ids,
        "last_layer_at_final_norm": runner.model.config.num_hidden_layers - 1 in ids,
        "stock_loop_indices": stock_loop, "aux_shape": shapes["manifest"], "stock_p50_s": q["stock"]["p50"],
        "manifest_p50_s": q["manifest"]["p50"], "ratio_p50": statistics.median(ratios),
        "ratio_p20": statistics.quantiles(ratios, n=10)[1], "ratio_p80": statistics.quantiles(ratios, n=10)[7],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=str(ROOT / "fixtures" / "tiny" / "target"))
    ap.add_argument("--ids", action="append", default=None,
                    help="manifest layer ids, comma-separated; repeat for several (default: N-3,-1,1 and N-1,-1,1)")
    ap.add_argument("--tokens", type=int, default=1024, help="prefill tokens per timed forward")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    # Each manifest round configures the capture again, which would arm the one-time first-batch self-check for
    # the timed forward: this benchmark measures the steady state, so the check is off here.
    os.environ["SGLANG_EAGLE3_CAPTURE_SELFCHECK"] = "0"
    import harness  # the repository root is on the path (below): never shipped, shared with the tests

    if args.device == "cpu":
        harness.use_cpu_runtime()  # as tests/conftest.py: the stub sgl_kernel first on the path, B1... on import
    import torch

    from harness.sglang_inprocess import get_runner
    from sglang_eagle3_capture.core.layer_ids import hidden_state_index
    from sglang_eagle3_capture.core.sglang import target as patch
    from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds

    server_args = {"max_total_tokens": max(4096, 2 * args.tokens)}
    if args.device == "cuda":
        server_args.update(device="cuda", attention_backend=None, dtype="bfloat16")
    runner = get_runner(args.target, **server_args)
    n = runner.model.config.num_hidden_layers
    id_lists = [[int(x) for x in a.split(",")] for a in args.ids] if args.ids else [[n - 3, -1, 1], [n - 1, -1, 1]]
    vocab = runner.model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    per = 128
    prompts = [torch.randint(2, vocab, (per,), generator=gen).tolist() for _ in range(max(1, args.tokens // per))]
    rows = []
    for ids in id_lists:
        if -1 not in ids:
            ap.error(f"--ids {ids} must include -1: stock SGLang is given the same layers as loop indices "
                     "starting at 0")
        # Stock stands in loop index N-1 for the unreachable N (the last layer's output).
        stock_loop = sorted(min(hidden_state_index(i), n - 1) for i in ids)
        if len(set(stock_loop)) != len(stock_loop):
            ap.error(f"--ids {ids}: with N-1 standing in for the last layer, stock would capture {stock_loop} twice")
        rows.append(_measure(runner, patch, DeclaredLayerIds, ids, stock_loop, prompts, args.rounds))
        rows[-1].update(device=args.device, target=str(args.target), num_hidden_layers=n,
                        torch_threads=torch.get_num_threads(), sglang_version=metadata.version("sglang"))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "capture_overhead.json").write_text(json.dumps(rows, indent=2) + "\n")
    with open(out_dir / "capture_overhead.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    print(f"capture overhead on {args.device}, {rows[0]['tokens']} tokens/forward, {args.rounds} alternating rounds:")
    for row in rows:
        print(f"  manifest {row['manifest_ids']} p50 {row['manifest_p50_s'] * 1e3:.1f} ms vs stock loop indices "
              f"{row['stock_loop_indices']} p50 {row['stock_p50_s'] * 1e3:.1f} ms: ratio p50 {row['ratio_p50']:.3f} "
              f"(p20 {row['ratio_p20']:.3f}, p80 {row['ratio_p80']:.3f})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
