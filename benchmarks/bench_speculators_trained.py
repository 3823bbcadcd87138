"""A draft trained by speculators' own trainer (fixtures/tiny-llama/speculators/), through real servers: what
speculators' validation said, what serving accepts with the plugin and with stock wiring, and the gap between them
that the draft vocabulary explains.

    python benchmarks/bench_speculators_trained.py [--num-prompts 240] [--out-dir benchmarks/results]

Per run: ``convert`` turns the committed speculators checkpoint into an SGLang draft directory; two
``python -m sglang.launch_server`` processes (bench_e2e.py's, on CPU through cpu_runtime/) serve the fixture's
held-out prompts greedily at the 1-step chain (1,1,2), stopping at EOS:

- ``stock``: the draft as SGLang reads a speculators checkpoint converted without this package
  (``fixtures.speculators_trained.stock_wiring_draft``: SGLang feeds its default layers), the plugin excluded;
- ``manifest``: ``convert``'s output with the plugin.

Offline, on training-style samples of the same prompts (every layer stored): ``verify --target``'s top-1 under each
wiring and its vocabulary figures (the target tokens outside the draft vocabulary; top-1 counting them as misses; top-1
as speculators' validation scores it). From the checkpoint: speculators' own ``val_metrics.json``.

Writes OUT_DIR/speculators_trained.json and .csv: one row per served variant (bench_e2e.py's figures: accept rate,
accept length, per-position acceptance, drafts, setting SGLang ran) with the run's common figures (speculators'
validation top-1, the vocabulary gap, EOS's share of validated and of drafted positions, the served figure they
predict for the plugin and the margin: fixtures/speculators_trained.py ``expected_served``, ``served_margin``).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from argparse import Namespace
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SETTING = (1, 1, 2)
LABEL = "tiny-llama+speculators"


def offline(draft: Path, target: Path, n: int, seed: int, lang) -> dict:
    """``verify`` on samples of the served prompts: the manifest's and stock default's top-1, and the vocabulary."""
    from fixtures.samples import make_samples
    from sglang_eagle3_capture.doctor.verify import verify

    n_layers = json.loads((target / "config.json").read_text())["num_hidden_layers"]
    with tempfile.TemporaryDirectory() as tmp:
        make_samples(target, tmp, n=n, seed=seed, lang=lang, layer_ids=list(range(-1, n_layers)))
        r = verify(draft, [tmp], target=target, progress=False, max_combinations=0)
    stock = next(c for c in r.candidates.candidates if any(n.startswith("stock default") for n in c.names))
    return {"manifest": r.candidates.manifest.top1, "stock": stock.top1, "stock_layer_ids": list(stock.layer_ids),
            "vocabulary": r.vocabulary.to_dict()}


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_e2e

    from fixtures import speculators_trained as st
    from sglang_eagle3_capture.doctor.convert import convert

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-prompts", type=int, default=240, help="held-out prompts served (fixtures/tiny-llama/"
                    "prompts.json, the first N; default 240)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--startup-timeout", type=float, default=900)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--log-dir", default=None)
    a = ap.parse_args(argv)
    log_dir = Path(a.log_dir or tempfile.mkdtemp(prefix="bench_speculators_trained_"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"[bench_speculators_trained] server logs in {log_dir}", flush=True)
    target = st.FIXTURE / "target"
    prompts = json.loads((st.FIXTURE / "prompts.json").read_text())[:a.num_prompts]
    val = json.loads((st.OUT / "val_metrics.json").read_text())["full_acc_0_epoch"]
    n_val = json.loads((st.OUT / "build.json").read_text())["data"]["validation_positions"]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        converted = convert(st.OUT, Path(tmp) / "converted", target=target).dst
        drafts = {"stock": st.stock_wiring_draft(converted, st.OUT, Path(tmp) / "stock"), "manifest": converted}
        off = offline(converted, target, len(prompts), st.HELDOUT_SEED, st.language())
        rows = []
        for variant, draft in drafts.items():
            args = Namespace(target=target, draft=draft, device="cpu", tp_size=1, server_arg=[], log_dir=log_dir,
                             startup_timeout=a.startup_timeout, max_new_tokens=None, concurrency=a.concurrency)
            print(f"[bench_speculators_trained] {variant}: starting server", flush=True)
            rows.append(bench_e2e.run_variant(args, variant, prompts, LABEL, SETTING))
    stock, plugin = rows
    gap = off["vocabulary"]
    oov_gap = gap["speculators_top1"] - gap["top1_oov_as_miss"]
    from fixtures.language import EOS

    lengths = [len([t for t in out if t != EOS]) for out in plugin["output_ids"]]
    eos_validated, eos_drafted = st.eos_shares(lengths)
    expected = st.expected_served(val, oov_gap, lengths)
    common = {
        "speculators_val_full_acc_0": val, "speculators_val_positions": n_val,
        "verify_manifest_top1": off["manifest"], "verify_stock_default_top1": off["stock"],
        "verify_stock_default_layer_ids": off["stock_layer_ids"],
        "verify_speculators_top1": gap["speculators_top1"],
        "verify_out_of_vocab_fraction": gap["out_of_vocab_fraction"],
        "verify_positions": gap["positions"], "oov_gap": round(oov_gap, 6),
        "eos_share_validated": round(eos_validated, 6), "eos_share_drafted": round(eos_drafted, 6),
        "expected_served_accept_rate": round(expected, 6),
        "margin": round(st.served_margin(val, n_val, plugin["accept_rate"], plugin["proposed_drafts"]), 6),
        "greedy_equal": stock["output_ids"] == plugin["output_ids"],
        "sglang_version": metadata.version("sglang"), "speculators_version": metadata.version("speculators"),
    }
    out_rows = [{**{k: v for k, v in r.items() if k != "output_ids"}, **common} for r in rows]
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "speculators_trained.json").write_text(json.dumps(out_rows, indent=2) + "\n")
    cols = list(dict.fromkeys(k for r in out_rows for k in r))
    with open(out / "speculators_trained.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()} for r in out_rows)
    for r in out_rows:
        print(f"{r['variant']:<9} accept rate {r['accept_rate']:.4f} accept length {r['accept_length']:.4f} over "
              f"{r['proposed_drafts']} drafts")
    print(f"speculators validation {val:.4f}; verify oov {gap['out_of_vocab_fraction']:.4f}, gap {oov_gap:.4f}; EOS "
          f"share validated {eos_validated:.4f}, drafted {eos_drafted:.4f}; expected served {expected:.4f} +- "
          f"{common['margin']:.4f}; {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
