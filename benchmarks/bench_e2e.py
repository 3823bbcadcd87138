"""End-to-end benchmark: accept rate and tok/s through real `python -m sglang.launch_server` processes.

Three variants on the same prompts, for each bundled fixture (fixtures/specs.py; ``--fixture`` picks some):
  no_spec   the target alone;
  stock     EAGLE-3 with SGLang's own wiring (this package's plugin excluded through SGLANG_PLUGINS);
  manifest  EAGLE-3 with the plugin and the draft's eagle3_manifest.json.

The fixtures: ``tiny`` (a DeepSeek-V3 target, draft on ``[-1, 0, 1]``) and ``tiny-llama`` (a Llama target, draft on
the embedding plus two later layers). A Llama target's embedding (layer id -1) is capturable from SGLang 0.5.22
on (the plugin refuses it at startup before), so on older releases run ``--fixture tiny`` only.

Prompts are sent as token ids to SGLang's native `POST /generate` (the tiny fixture target has no
tokenizer, which `python -m sglang.benchmark.serving` needs for its datasets). Accept length is read
both from `/server_info` (`internal_states[0].avg_spec_accept_length`, cumulative) and from each
request's `meta_info` (`spec_num_correct_drafts`, `spec_num_proposed_drafts`, `spec_verify_ct`).

CPU mode (default) starts the servers with the test-only CPU runtime from cpu_runtime/ (SGLang 0.5.23
does not run DeepSeek on this CPU without it) and the EAGLE-3 chain only (1 step, topk 1, 2 draft
tokens). GPU mode (`--device cuda`) starts plain servers with the usual speculative settings.

Writes benchmarks/results/e2e.json and e2e.csv (one row per fixture and variant, ``fixture`` first) and e2e.png.
``--gate`` checks every fixture run (:func:`gate`, per fixture).

Example::

    python benchmarks/bench_e2e.py                                   # both fixtures
    python benchmarks/bench_e2e.py --fixture tiny --num-prompts 240  # a name from fixtures/specs.py, or a dir
    python benchmarks/bench_e2e.py --device cuda --target /models/DeepSeek-V3 --draft /models/ds-eagle3 \\
        --prompts prompts.json --speculative-num-steps 3 --speculative-eagle-topk 4 \\
        --speculative-num-draft-tokens 8 --tp-size 8
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CPU_RUNTIME = ROOT / "cpu_runtime"
PLUGIN_NAME = "eagle3_capture"
VARIANTS = ("no_spec", "stock", "manifest")
DEFAULT_FIXTURES = ("tiny", "tiny-llama")  # fixtures/specs.py: SPECS


def fixture_path(name_or_dir: str) -> Path:
    """A bundled fixture's name (fixtures/NAME) or any fixture directory."""
    bundled = ROOT / "fixtures" / name_or_dir
    return bundled if "/" not in name_or_dir and (bundled / "fixture.json").is_file() else Path(name_or_dir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _other_plugins() -> str:
    """SGLANG_PLUGINS value that loads every installed general plugin except this package's."""
    names = sorted(ep.name for ep in metadata.entry_points(group="sglang.srt.plugins") if ep.name != PLUGIN_NAME)
    # An allowlist naming no installed plugin loads none (sglang/srt/plugins/__init__.py).
    return ",".join(names) or "none"


def _cpu_runtime():
    """cpu_runtime/sglang_cpu_patches.py (the standard library and the package's after-import helper only; this
    process imports no SGLang), imported from cpu_runtime/ put on sys.path."""
    if str(CPU_RUNTIME) not in sys.path:
        sys.path.insert(0, str(CPU_RUNTIME))
    import sglang_cpu_patches

    return sglang_cpu_patches


def server_env(variant: str, device: str) -> dict[str, str]:
    # CPU: the CPU runtime's environment (CPU_ENV, and its directory first on PYTHONPATH), as the tests use it.
    env = _cpu_runtime().cpu_env() if device == "cpu" else dict(os.environ)
    if variant == "stock":
        env["SGLANG_PLUGINS"] = _other_plugins()
    else:
        env.pop("SGLANG_PLUGINS", None)
    return env


def server_cmd(args, variant: str, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(args.target),
           "--host", "127.0.0.1", "--port", str(port), "--skip-tokenizer-init", "--tp-size", str(args.tp_size)]
    if args.device == "cpu":
        cmd += ["--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
                "--mem-fraction-static", "0.05", "--max-total-tokens", "16384", "--dtype", "float32",
                # avg_spec_accept_length appears in /server_info only after a decode log line
                "--decode-log-interval", "1"]
    cmd += args.server_arg
    if variant != "no_spec":
        cmd += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(args.draft),
                "--speculative-num-steps", str(args.speculative_num_steps),
                "--speculative-eagle-topk", str(args.speculative_eagle_topk),
                "--speculative-num-draft-tokens", str(args.speculative_num_draft_tokens)]
    return cmd


def _http(url: str, payload: dict | None = None, timeout: float = 600.0) -> dict:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    """A `python -m sglang.launch_server` process, its log in a file, killed with its process group."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_path: Path, port: int, timeout: float):
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; log {self.log_path}:\n"
                                   f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health_generate", timeout=30) as r:
                    if r.status == 200:
                        return
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"server not ready after {timeout:.0f} s; log {self.log_path}:\n"
                                       f"{self.log_tail()}")
                time.sleep(1.0)

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def run_variant(args, variant: str, prompts: list[list[int]], label: str = "") -> dict:
    port = _free_port()
    log = Path(args.log_dir) / f"server_{label + '_' if label else ''}{variant}.log"
    t0 = time.time()
    server = Server(server_cmd(args, variant, port), server_env(variant, args.device), log, port, args.startup_timeout)
    startup_s = time.time() - t0
    try:
        def request(p: list[int]) -> dict:
            sampling = {"max_new_tokens": args.max_new_tokens or len(p) - 2, "temperature": 0.0}
            return _http(server.url + "/generate", {"input_ids": p, "sampling_params": sampling})

        request(prompts[0])  # warm-up (excluded from timing): first-batch allocations
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            outs = list(pool.map(request, prompts))
        wall = time.perf_counter() - t0
        info = _http(server.url + "/server_info")
    finally:
        server.close()
    metas = [o["meta_info"] for o in outs]
    completion = sum(m["completion_tokens"] for m in metas)
    row = {
        "fixture": label, "variant": variant, "num_prompts": len(prompts), "completion_tokens": completion,
        "wall_s": round(wall, 3), "output_tok_per_s": round(completion / wall, 3), "startup_s": round(startup_s, 1),
        "output_ids": [o["output_ids"] for o in outs],
    }
    if variant == "no_spec":
        row.update(accept_length=1.0, accept_rate=None, correct_drafts=0, proposed_drafts=0, verify_ct=0)
        return row
    correct = sum(m["spec_num_correct_drafts"] for m in metas)
    proposed = sum(m["spec_num_proposed_drafts"] for m in metas)
    verify = sum(m["spec_verify_ct"] for m in metas)
    states = info.get("internal_states") or [{}]
    row.update(
        correct_drafts=correct, proposed_drafts=proposed, verify_ct=verify,
        accept_rate=round(correct / proposed, 4) if proposed else None,
        accept_length=round(completion / verify, 4) if verify else None,
        server_avg_spec_accept_length=states[0].get("avg_spec_accept_length"),
    )
    return row


def write_results(rows: list[dict], out_dir: Path, stem: str = "e2e") -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    keep = [{k: v for k, v in r.items() if k != "output_ids"} for r in rows]
    (out_dir / f"{stem}.json").write_text(json.dumps(keep, indent=2) + "\n")
    cols = list(dict.fromkeys(k for r in keep for k in r))
    with open(out_dir / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(keep)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no e2e.png", file=sys.stderr)
        return
    fixtures = list(dict.fromkeys(r.get("fixture", "") for r in keep))
    variants = list(dict.fromkeys(r["variant"] for r in keep))
    colors = {"no_spec": "grey", "stock": "tab:red", "manifest": "tab:green"}
    width = 0.8 / max(1, len(variants))
    fig, axes = plt.subplots(1, 2, figsize=(4 + 2 * len(fixtures), 3.4))
    for ax, key, title in ((axes[0], "accept_rate", "accept rate per drafted token"),
                           (axes[1], "output_tok_per_s", "output tok/s")):
        for j, v in enumerate(variants):
            vals = [next((r[key] or 0 for r in keep if r.get("fixture", "") == f and r["variant"] == v), 0)
                    for f in fixtures]
            ax.bar([i + (j - (len(variants) - 1) / 2) * width for i in range(len(fixtures))], vals, width,
                   label=v, color=colors.get(v))
        ax.set_xticks(range(len(fixtures)), fixtures)
        ax.set_title(title)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / f"{stem}.png", dpi=100)


def format_table(rows: list[dict]) -> str:
    head = (f"{'fixture':<11} {'variant':<9} {'accept_len':>10} {'accept_rate':>11} {'drafts':>7} {'tok/s':>8} "
            f"{'vs no_spec':>10} {'offline_acc':>11}")
    lines = [head, "-" * len(head)]
    for r in rows:
        rate = "-" if r.get("accept_rate") is None else f"{r['accept_rate']:.3f}"
        off = "-" if r.get("offline_accuracy") is None else f"{r['offline_accuracy']:.3f}"
        speedup = r.get("speedup_vs_no_spec") or 1.0
        lines.append(f"{r.get('fixture', ''):<11} {r['variant']:<9} {r['accept_length']:>10.3f} {rate:>11} "
                     f"{r.get('proposed_drafts', 0):>7} {r['output_tok_per_s']:>8.1f} {speedup:>9.2f}x {off:>11}")
    return "\n".join(lines)


def offline_accuracy(args, seed: int) -> dict[str, float]:
    """The doctor's teacher-forced top-1 on samples generated from the same prompts (fixture mode)."""
    import tempfile

    from fixtures.language import Language
    from fixtures.samples import make_samples
    from sglang_eagle3_capture.doctor.verify import verify

    fx = json.loads((Path(args.fixture) / "fixture.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        # Every layer stored, so stock SGLang's wiring can be built and scored too.
        make_samples(args.target, tmp, n=args.num_prompts, seed=seed, lang=Language(**fx["language"]),
                     layer_ids=list(range(-1, fx["num_hidden_layers"])))
        report = verify(args.draft, [tmp], progress=False, max_combinations=0)
    manifest = report.candidates.manifest
    installed = metadata.version("sglang")
    stock = next((c for c in report.candidates.candidates if any(_stock_row_covers(n, installed) for n in c.names)),
                 None)
    return {"manifest": manifest.top1, "stock": None if stock is None else stock.top1, "positions": manifest.positions}


def _stock_row_covers(name: str, version: str) -> bool:
    """Whether the doctor's row ``stock SGLang A [ids]`` or ``stock SGLang A .. B [ids]`` (consecutive releases of the
    release table that feed the same) includes ``version``."""
    import re

    from sglang_eagle3_capture import releases

    order = [r.version for r in releases.all_releases()]
    m = re.match(r"stock SGLang (\S+)(?: \.\. (\S+))?(?: \[|$)", name)
    ends = [e for e in m.groups() if e] if m else []
    if not ends or version not in order or any(e not in order for e in ends):
        return False
    return order.index(ends[0]) <= order.index(version) <= order.index(ends[-1])


def gate(rows: dict[str, dict], margin_offline: float, margin_stock: float, min_drafts: int = 0) -> list[str]:
    """The CI gate of issue 6 for one fixture's rows (by variant): compares numbers measured in this run only."""
    problems = []
    m, s = rows["manifest"], rows["stock"]
    for name in ("stock", "manifest"):
        if rows[name].get("proposed_drafts", 0) < min_drafts:
            problems.append(f"{name}: only {rows[name].get('proposed_drafts', 0)} drafted tokens, fewer than "
                            f"{min_drafts}; raise --num-prompts so sampling noise stays under the margins")
    if m["accept_rate"] < m["offline_accuracy"] - margin_offline:
        problems.append(f"manifest accept rate {m['accept_rate']:.3f} is more than {margin_offline} below the "
                        f"draft's offline accuracy {m['offline_accuracy']:.3f}")
    if s["accept_rate"] > m["accept_rate"] - margin_stock:
        problems.append(f"stock accept rate {s['accept_rate']:.3f} is not at least {margin_stock} below the "
                        f"manifest's {m['accept_rate']:.3f}")
    ref = rows.get("no_spec")
    for name in ("stock", "manifest"):
        if ref is not None and rows[name]["output_ids"] != ref["output_ids"]:
            problems.append(f"{name}: greedy output differs from no speculation (speculative decoding must not "
                            "change it)")
    return problems


def fixture_runs(fixtures: list[str] | None, target: str | None = None, draft: str | None = None
                 ) -> list[tuple[str, Path | None]]:
    """``(label, fixture dir)`` per run: every ``--fixture`` given (default :data:`DEFAULT_FIXTURES`), or the one
    ``--target`` run (its fixture, if one is named, supplies the draft and prompts)."""
    if target is None:
        return [(fixture_path(f).name, fixture_path(f)) for f in (fixtures or DEFAULT_FIXTURES)]
    if fixtures and len(fixtures) > 1:
        raise ValueError("--target runs one model pair; give at most one --fixture with it")
    fixture = fixture_path(fixtures[0]) if fixtures else None
    if draft is None and fixture is None:
        raise ValueError("--target needs --draft (or a --fixture to take the draft from)")
    return [(Path(target).parent.name or "custom", fixture)]


def gate_fixtures(by_fixture: dict[str, dict[str, dict]], margin_offline: float, margin_stock: float,
                  min_drafts: int = 0) -> list[str]:
    """:func:`gate` on every fixture's rows; each problem names its fixture."""
    return [f"{label}: {p}" for label, rows in by_fixture.items()
            for p in gate(rows, margin_offline, margin_stock, min_drafts)]


def run_fixture(args, label: str) -> dict[str, dict]:
    """Every variant on one fixture (or on ``--target``/``--draft``); rows by variant."""
    if args.prompts:
        prompts = json.loads(Path(args.prompts).read_text())
    else:
        from fixtures.language import Language
        from fixtures.samples import sample_prompts

        fx = json.loads((Path(args.fixture) / "fixture.json").read_text())
        prompts = sample_prompts(Language(**fx["language"]), args.num_prompts, args.prompt_seed)
    offline = offline_accuracy(args, args.prompt_seed) if args.fixture_mode and not args.prompts else {}
    rows = {}
    for variant in args.variants.split(","):
        log = f"{args.log_dir}/server_{label}_{variant}.log"
        print(f"[bench_e2e] {label} {variant}: starting server (log {log})", flush=True)
        rows[variant] = run_variant(args, variant, prompts, label)
        rows[variant]["offline_accuracy"] = offline.get(variant)
    base = rows.get("no_spec", {}).get("output_tok_per_s")
    for r in rows.values():
        r.update(speedup_vs_no_spec=round(r["output_tok_per_s"] / base, 3) if base else None,
                 offline_positions=offline.get("positions"))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Accept rate and tok/s through real SGLang servers.")
    ap.add_argument("--fixture", action="append", default=None,
                    help="a bundled fixture's name (fixtures/specs.py) or a fixture dir (target/, draft/, "
                    f"fixture.json); repeatable; default: {' '.join(DEFAULT_FIXTURES)}")
    ap.add_argument("--target", help="target model dir (with --draft: one run on these instead of a fixture)")
    ap.add_argument("--draft", help="EAGLE-3 draft dir with eagle3_manifest.json (default: FIXTURE/draft)")
    ap.add_argument("--prompts", help="JSON list of token-id lists (default: drawn from the fixture's language)")
    ap.add_argument("--num-prompts", type=int, default=480)
    ap.add_argument("--prompt-seed", type=int, default=20261129)
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="default: len(prompt) - 2, at least the fixture language's answer length plus EOS")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--tp-size", type=int, default=1)
    ap.add_argument("--speculative-num-steps", type=int, default=1)
    ap.add_argument("--speculative-eagle-topk", type=int, default=1)
    ap.add_argument("--speculative-num-draft-tokens", type=int, default=2)
    ap.add_argument("--server-arg", action="append", default=[], help="extra launch_server argument (repeatable)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--log-dir", default=None)
    ap.add_argument("--gate", action="store_true", help="exit 1 unless, for every fixture run, manifest accept rate "
                    ">= offline - 0.05, stock <= manifest - 0.2 (numbers from this run) and each EAGLE-3 variant "
                    "drafted >= --min-drafts")
    ap.add_argument("--min-drafts", type=int, default=2000)
    args = ap.parse_args(argv)
    try:
        runs = fixture_runs(args.fixture, args.target, args.draft)
    except ValueError as e:
        ap.error(str(e))
    if args.log_dir is None:
        import tempfile

        args.log_dir = tempfile.mkdtemp(prefix="bench_e2e_")
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    try:
        import torch

        device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else f"cpu ({os.cpu_count()} cores)"
    except Exception as e:  # noqa: BLE001 - the device name is informational only; say why it is missing
        device_name = f"{args.device} (name unavailable: {e})"
    target_arg, draft_arg = args.target, args.draft
    by_fixture: dict[str, dict[str, dict]] = {}
    for label, fixture in runs:
        args.fixture, args.fixture_mode = fixture, target_arg is None
        args.target = Path(target_arg or Path(fixture) / "target")
        args.draft = Path(draft_arg or Path(fixture) / "draft")
        by_fixture[label] = run_fixture(args, label)
        for r in by_fixture[label].values():
            r.update(sglang_version=metadata.version("sglang"), device=device_name,
                     spec_settings=None if r["variant"] == "no_spec" else
                     f"steps={args.speculative_num_steps},topk={args.speculative_eagle_topk},"
                     f"draft_tokens={args.speculative_num_draft_tokens},tp={args.tp_size}")
    rows = [r for fixture_rows in by_fixture.values() for r in fixture_rows.values()]
    write_results(rows, Path(args.out_dir))
    print(format_table(rows))
    if args.gate:
        problems = gate_fixtures(by_fixture, 0.05, 0.2, args.min_drafts)
        for p in problems:
            print(f"[bench_e2e] GATE FAILED: {p}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
