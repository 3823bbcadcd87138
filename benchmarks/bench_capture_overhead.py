"""Cost of the manifest capture itself: target forward time, manifest capture vs stock capture.

Both variants capture the same number of layers on the same SGLang model in one process:
  stock     plugin not applied; stock `set_eagle3_layers_to_capture` given the same layers as
            ascending loop indices (first index 0, so 0.5.23 applies no +1; no reordering);
  manifest  plugin applied; the manifest's ids (default [N-3, -1, 1]: the embedding included,
            not ascending) through the patched path, which also permutes
            the chunks into manifest order.
Rounds alternate stock/manifest so machine noise hits both alike; the result is the ratio of
medians (and p20/p80) measured side by side in this run.

CPU mode runs SGLang's real DeepSeek-V3 in-process with the test-only CPU shim (tests/cpu_shim);
`--device cuda` runs the same on a GPU without the shim (CUDA graphs are not used: this times
`model.forward` on one prefill batch).

Writes benchmarks/results/capture_overhead.json and .csv.

Example::

    python benchmarks/bench_capture_overhead.py --rounds 30
    python benchmarks/bench_capture_overhead.py --target fixtures/tiny/target --ids=-1,4,1 --tokens 2048
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


def _cpu_setup() -> None:
    """Same set-up as tests/conftest.py: the stub sgl_kernel first on the path and B1-B3 on import."""
    for p in (ROOT / "tests", ROOT / "tests" / "cpu_shim"):
        sys.path.insert(0, str(p))
    import sglang_cpu_patches

    os.environ.update(sglang_cpu_patches.cpu_env())
    sglang_cpu_patches.install_import_hook()


def _quantiles(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=10)
    return {"p50": statistics.median(xs), "p20": q[1], "p80": q[7]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default=str(ROOT / "fixtures" / "tiny" / "target"))
    ap.add_argument("--ids", default=None, help="manifest layer ids, comma-separated (default: -1,1,N-3)")
    ap.add_argument("--tokens", type=int, default=1024, help="prefill tokens per timed forward")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out-dir", default=str(RESULTS))
    args = ap.parse_args(argv)
    if args.device == "cpu":
        _cpu_setup()
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    from sglang_inprocess import get_runner

    from sglang_eagle3_capture import patch
    from sglang_eagle3_capture.layer_ids import hidden_state_index
    from sglang_eagle3_capture.wiring import DeclaredLayerIds

    server_args = {"max_total_tokens": max(4096, 2 * args.tokens)}
    if args.device == "cuda":
        server_args.update(device="cuda", attention_backend=None, dtype="bfloat16")
    runner = get_runner(args.target, **server_args)
    n = runner.model.config.num_hidden_layers
    ids = [int(x) for x in args.ids.split(",")] if args.ids else [n - 3, -1, 1]
    if -1 not in ids:
        ap.error("--ids must include -1: stock SGLang is given the same layers as loop indices starting at 0")
    stock_loop = sorted(hidden_state_index(i) for i in ids)
    vocab = runner.model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    per = 128
    prompts = [torch.randint(2, vocab, (per,), generator=gen).tolist() for _ in range(max(1, args.tokens // per))]

    def stock():
        patch.revert()
        runner.reset_capture()
        vars(runner.model.model).pop("_eagle3_capture_feed", None)
        runner.model.set_eagle3_layers_to_capture(stock_loop)

    def manifest():
        patch.apply()
        runner.reset_capture()
        runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds(ids, "bench manifest"))

    times: dict[str, list[float]] = {"stock": [], "manifest": []}
    shapes = {}
    for r in range(args.rounds + 2):  # two warm-up rounds, not recorded
        for name, configure in (("stock", stock), ("manifest", manifest)) if r % 2 == 0 else (("manifest", manifest), ("stock", stock)):
            configure()
            t0 = time.perf_counter()
            out = runner.prefill(prompts)
            dt = time.perf_counter() - t0
            shapes[name] = list(out.aux.shape)
            if r >= 2:
                times[name].append(dt)
    patch.revert()
    runner.reset_capture()
    q = {k: _quantiles(v) for k, v in times.items()}
    ratios = [m / s for m, s in zip(times["manifest"], times["stock"])]
    row = {
        "bench": "capture_overhead", "device": args.device, "target": str(args.target), "num_hidden_layers": n,
        "tokens": len(prompts) * per, "rounds": args.rounds, "manifest_ids": ids, "stock_loop_indices": stock_loop,
        "aux_shape": shapes["manifest"], "stock_p50_s": q["stock"]["p50"], "manifest_p50_s": q["manifest"]["p50"],
        "ratio_p50": statistics.median(ratios), "ratio_p20": statistics.quantiles(ratios, n=10)[1],
        "ratio_p80": statistics.quantiles(ratios, n=10)[7], "torch_threads": torch.get_num_threads(),
        "sglang_version": metadata.version("sglang"),
    }
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "capture_overhead.json").write_text(json.dumps([row], indent=2) + "\n")
    with open(out_dir / "capture_overhead.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})
    print(f"capture overhead on {args.device}, {row['tokens']} tokens/forward, {args.rounds} alternating rounds:")
    print(f"  stock    {stock_loop} (loop indices): p50 {q['stock']['p50'] * 1e3:.1f} ms")
    print(f"  manifest {ids} (layer ids):   p50 {q['manifest']['p50'] * 1e3:.1f} ms")
    print(f"  ratio manifest/stock: p50 {row['ratio_p50']:.3f} (p20 {row['ratio_p20']:.3f}, p80 {row['ratio_p80']:.3f})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
