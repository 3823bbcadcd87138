"""End-to-end benchmark: what users read (accept length, accept rate, per-position acceptance, output tok/s)
through real `python -m sglang.launch_server` processes, per fixture and speculative setting.

Variants on the same prompts, for each fixture (fixtures/specs.py, or any fixture dir via ``--fixture DIR``):
  no_spec   the target alone (one server per fixture: it has no speculative setting);
  stock     EAGLE-3 with SGLang's own wiring (this package's plugin excluded through SGLANG_PLUGINS);
  manifest  EAGLE-3 with the plugin and the draft's eagle3_manifest.json;
the EAGLE-3 variants once per setting ``STEPS,TOPK,DRAFT_TOKENS`` of ``--settings`` (default ``3,1,4``, a 3-step
chain; ``--full``: also the 1-step chain ``1,1,2`` and the tree ``3,2,6``). On CPU the servers run with the
test-only CPU runtime from cpu_runtime/ (its B7/B8 patches give torch_native a multi-step draft decode backend and a
tree-masked verify); ``--device cuda`` starts plain servers. ``--start-jobs N`` starts up to N servers at once and
measures them one after another (startup is mostly single-threaded imports; the idle ones sleep, so each batch is
timed alone).

The fixtures: ``tiny`` (a DeepSeek-V3 target, drafts on ``[-1, 0, 1]``) and ``tiny-llama`` (a Llama target, drafts
on the embedding plus two later layers). Each serves its depth-capable draft, ``FIXTURE/draft-ttt`` (test-time
trained over 4 draft steps, fixtures/specs.py: DRAFTS), so a chain's later positions are accepted as with real
drafts; ``--draft-name draft`` serves the one-step drafts instead. A Llama target's embedding (layer id -1) is
capturable from SGLang 0.5.22 on (the plugin refuses it at startup before), so on older releases run ``--fixture
tiny`` only.

Prompts are sent as token ids to SGLang's native `POST /generate` (the tiny fixture target has no tokenizer, which
`python -m sglang.benchmark.serving` needs). Every figure comes from what the server returns, summed over requests:

- per request SGLang's ``meta_info`` (sglang/srt/managers/tokenizer_manager.py, the speculative metrics) has
  ``spec_verify_ct`` (verify steps), ``spec_num_correct_drafts`` (draft tokens accepted, the bonus token
  excluded), ``spec_num_proposed_drafts`` (= spec_verify_ct * (speculative_num_draft_tokens - 1)) and
  ``spec_correct_drafts_histogram`` (entry j: the verify steps that accepted exactly j draft tokens; 0.5.17 also
  names it ``spec_accept_histogram``);
- ``accept_length``: mean tokens committed per verify step, ``1 + sum(correct drafts) / sum(verify steps)``
  (the mean of the histogram plus the bonus token); ``sglang_accept_length`` is SGLang's own per-request
  figure, ``completion_tokens / spec_verify_ct``, summed the same way (it also counts the token the prefill
  emits, so it is a little higher);
- ``accept_histogram``: the requests' histograms added entry by entry (``accept_histogram[j]``: verify steps that
  accepted exactly j draft tokens; its sum is ``verify_ct``);
- ``accept_rate``: ``sum(correct drafts) / sum(proposed drafts)``, SGLang's definition (its log line's "accept
  rate"); for a tree the denominator counts every tree node, ``num_draft_tokens - 1``, although at most
  ``steps`` can be accepted;
- ``per_position_acceptance[k]``: the fraction of verify steps that accepted at least k+1 draft tokens,
  ``sum(histogram[k+1:]) / sum(histogram)``, for k = 0 .. steps-1 (position 0 is the draft's first token,
  predicted from the target's own states: in a chain it should match the draft's offline accuracy);
- ``output_tok_per_s``: completion tokens of all requests over the wall time of the concurrent batch (a warm-up
  request excluded);
- the effective settings SGLang ran with (``speculative_algorithm``, ``speculative_num_steps``,
  ``speculative_eagle_topk``, ``speculative_num_draft_tokens``, ``attention_backend``, and the speculative
  backends where the release has them) read back from ``/server_info``, not echoed from the command line;
  ``setting`` is what was asked for;
- ``offline_accuracy``: the doctor's teacher-forced top-1 on training-style samples of the same prompts, the
  draft's fc fed what that variant feeds (fixture mode only).

Writes OUT_DIR/e2e.json and e2e.csv (one row per fixture, setting and variant; no_spec's setting is empty) and
e2e.png (per fixture: accept length by setting and wiring, and per-position acceptance, plugin against stock).
``--gate`` checks every fixture and setting (:func:`gate`).

Example::

    python benchmarks/bench_e2e.py                                          # both fixtures, 3,1,4 (make demo)
    python benchmarks/bench_e2e.py --full                                   # 1,1,2 3,1,4 3,2,6
    python benchmarks/bench_e2e.py --fixture tiny --settings 1,1,2 3,1,4 3,2,6 --num-prompts 160
    python benchmarks/bench_e2e.py --fixture fixtures/NEW                   # any fixture directory
    python benchmarks/bench_e2e.py --device cuda --target /models/DeepSeek-V3 --draft /models/ds-eagle3 \\
        --prompts prompts.json --settings 3,4,8 --tp-size 8
"""

from __future__ import annotations

import argparse
import csv
import json
import math
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
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CPU_RUNTIME = ROOT / "cpu_runtime"
PLUGIN_NAME = "eagle3_capture"
VARIANTS = ("no_spec", "stock", "manifest")
DEFAULT_FIXTURES = ("tiny", "tiny-llama")  # fixtures/specs.py: SPECS
# Each bundled fixture's depth-capable draft (fixtures/specs.py: DRAFTS); "draft" is its one-step draft.
DEFAULT_DRAFT_NAME = "draft-ttt"
Setting = tuple[int, int, int]  # (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens)
DEFAULT_SETTINGS: tuple[Setting, ...] = ((3, 1, 4),)
FULL_SETTINGS: tuple[Setting, ...] = ((1, 1, 2), (3, 1, 4), (3, 2, 6))
# Under the table, one line: what a newcomer asks first (docs/benchmarks.md says more); the tok/s part on CPU only.
ACCEPT_NOTE = "accept length: tokens committed per target verify (1 = no speculation)."
CPU_NOTE = ("Speculation lowers tok/s on this CPU: a verify step and the draft's steps run through the test-only CPU "
            "runtime and cost several plain decode steps, more than the 2-4 tokens they commit.")
# What /server_info reports of the setting SGLang ran with (absent keys are left out of a row).
EFFECTIVE_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                  "speculative_num_draft_tokens", "attention_backend", "speculative_draft_attention_backend",
                  "speculative_attention_mode")


def parse_setting(text: str) -> Setting:
    """``STEPS,TOPK,DRAFT_TOKENS`` (e.g. ``3,1,4``) as three ints; ValueError naming what is wrong."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"setting {text!r} is not STEPS,TOPK,DRAFT_TOKENS (three positive integers, e.g. 3,1,4)")
    steps, topk, tokens = (int(p) for p in parts)
    if min(steps, topk, tokens) < 1:
        raise ValueError(f"setting {text!r}: steps, topk and draft tokens must each be at least 1")
    return steps, topk, tokens


def setting_label(setting: Setting | None) -> str:
    return "" if setting is None else ",".join(map(str, setting))


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


def server_cmd(args, variant: str, port: int, setting: Setting | None = None) -> list[str]:
    """The launch_server command; an EAGLE-3 variant runs ``setting`` (default: the args'
    speculative_num_steps / speculative_eagle_topk / speculative_num_draft_tokens, as bench_load.py sets them)."""
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(args.target),
           "--host", "127.0.0.1", "--port", str(port), "--skip-tokenizer-init", "--tp-size", str(args.tp_size)]
    if args.device == "cpu":
        # --mem-fraction-static 0.5 as harness.ENGINE_DEFAULTS has it: SGLang's KV budget on CPU is the host's free
        # memory after the weights load less (1 - fraction) x the free memory before
        # (mem_cache/kv_cache_configurator.py: _profile_available_bytes), so at 0.05 the servers starting beside one
        # (about 1 GB each, --start-jobs) failed it; --max-total-tokens still caps the KV cache.
        cmd += ["--device", "cpu", "--attention-backend", "torch_native", "--disable-cuda-graph",
                "--mem-fraction-static", "0.5", "--max-total-tokens", "16384", "--dtype", "float32",
                # avg_spec_accept_length appears in /server_info only after a decode log line
                "--decode-log-interval", "1"]
    if getattr(args, "start_jobs", 1) > 1:
        cmd += ["--sleep-on-idle"]  # a started server waiting for its turn does not spin on a core
    cmd += args.server_arg
    if variant != "no_spec":
        steps, topk, tokens = setting or (args.speculative_num_steps, args.speculative_eagle_topk,
                                          args.speculative_num_draft_tokens)
        cmd += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(args.draft),
                "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                "--speculative-num-draft-tokens", str(tokens)]
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


def ratio_se(ys: list[float], xs: list[float]) -> float | None:
    """Standard error of ``sum(ys) / sum(xs)`` over independent requests (request i: ``ys[i]`` of ``xs[i]``), in the
    linearised form a ratio estimator over clusters has: a request's verify steps are not independent of one
    another (a draft that misses once tends to miss again), the requests are. None with fewer than 2 requests."""
    n, total = len(xs), sum(xs)
    if n < 2 or not total:
        return None
    r = sum(ys) / total
    return math.sqrt(n / (n - 1) * sum((y - r * x) ** 2 for y, x in zip(ys, xs))) / total


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def acceptance(metas: list[dict], completion: int) -> dict:
    """The speculative figures of one run from its requests' meta_info (the module docstring says how each is
    computed), each with its standard error over requests (:func:`ratio_se`; ``accept_length_se`` is that of
    ``accept_length``); ``per_position_acceptance`` has one entry per draft position the histogram reaches, at least
    ``len(accept_histogram) - 1``; the caller pads it to the setting's step count."""
    verifies = [m.get("spec_verify_ct", 0) for m in metas]
    corrects = [m.get("spec_num_correct_drafts", 0) for m in metas]
    proposeds = [m.get("spec_num_proposed_drafts", 0) for m in metas]
    verify, correct, proposed = sum(verifies), sum(corrects), sum(proposeds)
    hists = [m.get("spec_correct_drafts_histogram", m.get("spec_accept_histogram")) for m in metas]
    # a request without verify steps has no histogram; any other without one: a release that does not report it
    have_hist = all(h is not None or not v for h, v in zip(hists, verifies))
    hists = [h or [] for h in hists]
    hist = [sum(h[j] for h in hists if j < len(h)) for j in range(max(map(len, hists), default=0))]
    if not have_hist or sum(hist) != verify:
        hist, per_position, position_se = None, None, None  # absent, or disagreeing with the verify count
    else:
        per_position = [round(sum(hist[k + 1:]) / verify, 4) if verify else None for k in range(max(len(hist) - 1, 0))]
        position_se = [_round(ratio_se([sum(h[k + 1:]) for h in hists], verifies)) for k in range(len(per_position))]
    return {
        "verify_ct": verify, "correct_drafts": correct, "proposed_drafts": proposed,
        "accept_length": round(1 + correct / verify, 4) if verify else None,
        "accept_length_se": _round(ratio_se(corrects, verifies)),
        "sglang_accept_length": round(completion / verify, 4) if verify else None,
        "accept_rate": round(correct / proposed, 4) if proposed else None,
        "accept_rate_se": _round(ratio_se(corrects, proposeds)),
        "accept_histogram": hist, "per_position_acceptance": per_position, "per_position_se": position_se,
    }


def effective_settings(info: dict) -> dict:
    """The setting SGLang ran with, as its /server_info reports it."""
    return {k: info[k] for k in EFFECTIVE_KEYS if k in info}


def start_variant(args, variant: str, label: str = "", setting: Setting | None = None) -> tuple[Server, float]:
    """A ready server for ``variant`` at ``setting`` and its startup time in seconds."""
    port = _free_port()
    tag = "_".join(x for x in (label, setting_label(setting).replace(",", "-"), variant) if x)
    log = Path(args.log_dir) / f"server_{tag}.log"
    t0 = time.time()
    server = Server(server_cmd(args, variant, port, setting), server_env(variant, args.device), log, port,
                    args.startup_timeout)
    return server, time.time() - t0


def run_variant(args, variant: str, prompts: list[list[int]], label: str = "", setting: Setting | None = None
                ) -> dict:
    """Start ``variant``'s server, measure it on ``prompts`` (:func:`measure_variant`) and stop it."""
    return measure_variant(args, *start_variant(args, variant, label, setting), variant, prompts, label, setting)


def measure_variant(args, server: Server, startup_s: float, variant: str, prompts: list[list[int]], label: str = "",
                    setting: Setting | None = None) -> dict:
    """The row of one variant: ``prompts`` sent to the ready ``server`` by ``--concurrency`` clients (a warm-up
    request first, not timed); the server is stopped afterwards."""
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
        "fixture": label, "setting": setting_label(setting) if variant != "no_spec" else "", "variant": variant,
        "num_prompts": len(prompts), "completion_tokens": completion, "wall_s": round(wall, 3),
        "output_tok_per_s": round(completion / wall, 3), "startup_s": round(startup_s, 1),
        **effective_settings(info), "output_ids": [o["output_ids"] for o in outs],
    }
    if variant == "no_spec":
        row.update(accept_length=1.0, accept_rate=None, correct_drafts=0, proposed_drafts=0, verify_ct=0)
        return row
    row.update(acceptance(metas, completion))
    if row["per_position_acceptance"] is not None:  # one entry per draft position of the setting
        steps = setting[0] if setting else args.speculative_num_steps
        for key in ("per_position_acceptance", "per_position_se"):  # a position no verify reached: 0, exactly
            row[key] = (row[key] + [0.0] * steps)[:steps]
    states = info.get("internal_states") or [{}]
    row["server_avg_spec_accept_length"] = states[0].get("avg_spec_accept_length")
    return row


def _shown(path: Path) -> str:
    """``path`` relative to the repository when inside it (results name fixtures/tiny/draft-ttt, not /home/...)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _cell(v):
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def write_results(rows: list[dict], out_dir: Path, stem: str = "e2e") -> None:
    """JSON (rows as they are, without the output ids), CSV (lists as JSON text) and the PNG: per fixture, accept
    length by setting and wiring beside per-position acceptance, plugin against stock."""
    out_dir.mkdir(parents=True, exist_ok=True)
    keep = [{k: v for k, v in r.items() if k != "output_ids"} for r in rows]
    (out_dir / f"{stem}.json").write_text(json.dumps(keep, indent=2) + "\n")
    cols = list(dict.fromkeys(k for r in keep for k in r))
    with open(out_dir / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows({k: _cell(v) for k, v in r.items()} for r in keep)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no e2e.png", file=sys.stderr)
        return
    fixtures = list(dict.fromkeys(r["fixture"] for r in keep))
    fig, axes = plt.subplots(len(fixtures), 2, figsize=(9.5, 0.4 + 3.4 * len(fixtures)), squeeze=False)
    for (left, right), fixture in zip(axes, fixtures):
        of_fixture = [r for r in keep if r["fixture"] == fixture]
        draft = next((Path(r["draft"]).name for r in of_fixture if r.get("draft")), None)
        title = fixture if draft is None else f"{fixture} ({draft})"
        plot_fixture(left, of_fixture, title)
        plot_positions(right, of_fixture, title)
        left.set_ylabel("accept length (tokens per verify)")
        right.set_ylabel("acceptance at the position")
    axes[0][0].legend(fontsize=8, loc="upper left")
    axes[0][1].legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(out_dir / f"{stem}.png", dpi=100)
    plt.close(fig)


def plot_fixture(ax, rows: list[dict], title: str) -> None:
    """Accept length per setting (x) and wiring (bars); no speculation's 1.0 as a line."""
    colors = {"stock": "tab:red", "manifest": "tab:green"}
    labels = {"stock": "stock wiring", "manifest": "plugin (manifest)"}
    settings = list(dict.fromkeys(r["setting"] for r in rows if r["setting"]))
    variants = [v for v in ("stock", "manifest") if any(r["variant"] == v for r in rows)]
    width = 0.8 / max(1, len(variants))
    for j, v in enumerate(variants):
        xs = [i + (j - (len(variants) - 1) / 2) * width for i in range(len(settings))]
        vals = [next((r["accept_length"] or 0 for r in rows if r["setting"] == s and r["variant"] == v), 0)
                for s in settings]
        bars = ax.bar(xs, vals, width, label=labels[v], color=colors.get(v))
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="no_spec")
    ax.set_xticks(range(len(settings)), [f"steps,topk,tokens\n{s}" if i == 0 else s for i, s in enumerate(settings)],
                  fontsize=8)
    ax.set_ylim(0, max([2.0] + [(r["accept_length"] or 0) * 1.15 for r in rows]))
    ax.set_title(title)


def plot_positions(ax, rows: list[dict], title: str) -> None:
    """Per-position acceptance (the fraction of verify steps that accepted at least k drafts, k = 1 .. steps), one
    line per setting and wiring: the plugin's decays as a depth-trained draft's does; stock wiring's starts low."""
    colors = {"stock": "tab:red", "manifest": "tab:green"}
    labels = {"stock": "stock", "manifest": "plugin"}
    markers = "osD^v"
    settings = list(dict.fromkeys(r["setting"] for r in rows if r["setting"]))
    for i, setting in enumerate(settings):
        for r in rows:
            pos = r.get("per_position_acceptance")
            if r["setting"] != setting or r["variant"] not in colors or not pos:
                continue
            xs = range(1, len(pos) + 1)
            ax.plot(xs, pos, color=colors[r["variant"]], marker=markers[i % len(markers)],
                    linestyle="-" if r["variant"] == "manifest" else "--",
                    label=f"{labels[r['variant']]} {setting}")
            for x, y in zip(xs, pos) if len(settings) == 1 else ():  # several settings: the table has the numbers
                ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
    steps = max([len(r.get("per_position_acceptance") or []) for r in rows] + [1])
    ax.set_xticks(range(1, steps + 1))
    ax.set_xlim(0.7, steps + 0.3)
    ax.set_xlabel("draft position")
    ax.set_ylim(0, 1.3)
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.set_title(f"{title}: per position")


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_table(rows: list[dict]) -> str:
    head = (f"{'fixture':<11} {'setting':<7} {'variant':<9} {'acc_len':>7} {'acc_rate':>8} {'per-position':<22} "
            f"{'tok/s':>7} {'offline':>7} {'ran with (steps,topk,tokens backend)':<36}")
    lines = [head, "-" * len(head)]
    for r in rows:
        pos = " ".join(f"{p:.2f}" for p in r.get("per_position_acceptance") or []) or "-"
        ran = ",".join(str(r.get(k, "?")) for k in EFFECTIVE_KEYS[1:4]) if r["variant"] != "no_spec" else "-"
        lines.append(f"{r['fixture']:<11} {r['setting'] or '-':<7} {r['variant']:<9} "
                     f"{_num(r['accept_length'], '.3f'):>7} {_num(r.get('accept_rate'), '.3f'):>8} {pos:<22} "
                     f"{r['output_tok_per_s']:>7.1f} {_num(r.get('offline_accuracy'), '.3f'):>7} "
                     f"{ran} {r.get('attention_backend', '?')}")
    drafts = dict.fromkeys(f"{r['fixture']}: {r['draft']}" for r in rows if r.get("draft"))
    if drafts:
        lines.append("drafts: " + ", ".join(drafts))
    on_cpu = all(str(r.get("device", "cpu")).startswith("cpu") for r in rows)
    return "\n".join(lines + [f"{ACCEPT_NOTE} {CPU_NOTE}" if on_cpu else ACCEPT_NOTE])


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

    from sglang_eagle3_capture.doctor import release_table

    order = [r.version for r in release_table.all_releases()]
    m = re.match(r"stock SGLang (\S+)(?: \.\. (\S+))?(?: \[|$)", name)
    ends = [e for e in m.groups() if e] if m else []
    if not ends or version not in order or any(e not in order for e in ends):
        return False
    return order.index(ends[0]) <= order.index(version) <= order.index(ends[-1])


class Limits(NamedTuple):
    """The gate's margins, set for the bundled depth-capable drafts at 3,1,4 (docs/benchmarks.md: each about half
    the smallest plugin-stock gap measured, so a correct run and a plugin that feeds stock's layers are each many
    standard errors from it)."""

    offline: float = 0.05  # the plugin's first-position acceptance at most this far below the draft's offline accuracy
    position: float = 0.2  # the plugin's acceptance at every draft position at least this far above stock's
    rate: float = 0.25  # the plugin's accept rate at least this far above stock's
    length: float = 0.8  # the plugin's accept length at least this far above stock's
    min_drafts: int = 0  # each EAGLE-3 variant proposed at least this many draft tokens


def positions(row: dict) -> list[float] | None:
    """Per-position acceptance (the fraction of verify steps that accepted at least k drafts, k = 1 .. steps);
    without a histogram, a 1-step chain's accept rate is its one position."""
    if row.get("per_position_acceptance"):
        return row["per_position_acceptance"]
    return [row["accept_rate"]] if row.get("speculative_num_steps") == 1 and row.get("accept_rate") is not None \
        else None


def gate(rows: dict[str, dict], limits: Limits, setting: Setting | None = None) -> list[str]:
    """The CI gate for one fixture and setting (rows by variant: stock, manifest and no_spec when it ran); compares
    numbers measured in this run only."""
    problems = []
    m, s = rows["manifest"], rows["stock"]
    for name in ("stock", "manifest"):
        r = rows[name]
        if r.get("proposed_drafts", 0) < limits.min_drafts:
            problems.append(f"{name}: only {r.get('proposed_drafts', 0)} drafted tokens, fewer than "
                            f"{limits.min_drafts}; raise --num-prompts so sampling noise stays under the margins")
        ran = tuple(r.get(k) for k in EFFECTIVE_KEYS[1:4])
        if setting is not None and ran != tuple(setting):
            problems.append(f"{name}: SGLang ran steps,topk,draft_tokens {ran} (its /server_info), not the "
                            f"{tuple(setting)} asked for; the figures would be labelled with the wrong setting")
    ours, theirs, offline = positions(m), positions(s), m.get("offline_accuracy")
    first = ours[0] if ours else None
    if offline is not None and (first is None or first < offline - limits.offline):
        problems.append(f"manifest first-position acceptance {_num(first, '.3f')} is more than {limits.offline} "
                        f"below the draft's offline accuracy {offline:.3f}")
    for k, (a, b) in enumerate(zip(ours or [], theirs or [])):
        if b > a - limits.position:
            problems.append(f"stock acceptance at position {k + 1} {b:.3f} is not at least {limits.position} below "
                            f"the manifest's {a:.3f}")
    for key, margin in (("accept_rate", limits.rate), ("accept_length", limits.length)):
        if m.get(key) is None or s.get(key) is None:
            problems.append(f"{key} not measured (stock {_num(s.get(key), '.3f')}, manifest "
                            f"{_num(m.get(key), '.3f')}): a variant ran no verify step")
        elif s[key] > m[key] - margin:
            problems.append(f"stock {key} {s[key]:.3f} is not at least {margin} below the manifest's {m[key]:.3f}")
    ref = rows.get("no_spec")
    for name in ("stock", "manifest"):
        if ref is not None and rows[name]["output_ids"] != ref["output_ids"]:
            problems.append(f"{name}: greedy output differs from no speculation (speculative decoding must not "
                            "change it)")
    return problems


def gate_fixtures(by_fixture: dict[str, dict[str, dict[str, dict]]], limits: Limits) -> list[str]:
    """:func:`gate` on every fixture's every setting ({fixture: {setting label: rows by variant}}); each problem
    names its fixture and setting."""
    return [f"{label} {key}: {p}" for label, by_setting in by_fixture.items() for key, rows in by_setting.items()
            for p in gate(rows, limits, parse_setting(key))]


def fixture_runs(fixtures: list[str] | None, target: str | None = None, draft: str | None = None
                 ) -> list[tuple[str, Path | None]]:
    """``(label, fixture dir)`` per run: every ``--fixture`` given (default :data:`DEFAULT_FIXTURES`), or the one
    ``--target`` run (its fixture, if one is named, supplies the draft and prompts). ``--draft`` with one fixture
    runs that fixture's target and prompts with another draft (e.g. fixtures/tiny-llama/draft-ttt), labelled
    ``FIXTURE+DRAFT``."""
    if target is None and draft is not None:
        if fixtures is None or len(fixtures) != 1:
            raise ValueError("--draft without --target names one --fixture (its target and prompts)")
        return [(f"{fixture_path(fixtures[0]).name}+{Path(draft).name}", fixture_path(fixtures[0]))]
    if target is None:
        return [(fixture_path(f).name, fixture_path(f)) for f in (fixtures or DEFAULT_FIXTURES)]
    if fixtures and len(fixtures) > 1:
        raise ValueError("--target runs one model pair; give at most one --fixture with it")
    fixture = fixture_path(fixtures[0]) if fixtures else None
    if draft is None and fixture is None:
        raise ValueError("--target needs --draft (or a --fixture to take the draft from)")
    return [(Path(target).parent.name or "custom", fixture)]


def run_fixture(args, label: str, settings: list[Setting]) -> dict[str, dict[str, dict]]:
    """no_spec once, then every EAGLE-3 variant per setting, on one fixture (or on ``--target``/``--draft``); rows
    by setting label, then variant (the no_spec row is shared by every setting)."""
    if args.prompts:
        prompts = json.loads(Path(args.prompts).read_text())
    else:
        from fixtures.language import Language
        from fixtures.samples import sample_prompts

        fx = json.loads((Path(args.fixture) / "fixture.json").read_text())
        prompts = sample_prompts(Language(**fx["language"]), args.num_prompts, args.prompt_seed)
    offline = offline_accuracy(args, args.prompt_seed) if args.fixture_mode and not args.prompts else {}
    variants = args.variants.split(",")
    jobs = [("no_spec", None)] if "no_spec" in variants else []
    jobs += [(v, s) for s in settings for v in variants if v != "no_spec"]
    measured = {}
    for i in range(0, len(jobs), args.start_jobs):
        group = jobs[i:i + args.start_jobs]
        for variant, setting in group:
            print(f"[bench_e2e] {label} {setting_label(setting) or '-'} {variant}: starting server", flush=True)
        started = start_group(args, group, label)
        for n, ((variant, setting), (server, startup_s)) in enumerate(zip(group, started)):
            try:
                row = measure_variant(args, server, startup_s, variant, prompts, label, setting)
            except BaseException:
                for waiting, _ in started[n + 1:]:
                    waiting.close()
                raise
            measured[variant, setting] = {**row, "offline_accuracy": offline.get(variant)}
    plain = measured.get(("no_spec", None))
    by_setting = {}
    for setting in settings:
        rows = {} if plain is None else {"no_spec": plain}
        rows.update({v: measured[v, setting] for v in variants if v != "no_spec"})
        by_setting[setting_label(setting)] = rows
    base = None if plain is None else plain["output_tok_per_s"]
    for rows in by_setting.values():
        for r in rows.values():
            r.update(speedup_vs_no_spec=round(r["output_tok_per_s"] / base, 3) if base else None,
                     offline_positions=offline.get("positions"))
    return by_setting


def start_group(args, jobs: list[tuple[str, Setting | None]], label: str) -> list[tuple[Server, float]]:
    """Start every ``(variant, setting)`` of ``jobs`` at once; all ready, or none left running."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(start_variant, args, variant, label, setting) for variant, setting in jobs]
    started, errors = [], []
    for f in futures:
        try:
            started.append(f.result())
        except Exception as e:  # noqa: BLE001 - re-raised below once the others are stopped
            errors.append(e)
    if errors:
        for server, _ in started:
            server.close()
        raise errors[0]
    return started


def rows_of(by_setting: dict[str, dict[str, dict]]) -> list[dict]:
    """Each row once (no_spec first, then the settings in order)."""
    seen, out = set(), []
    for rows in by_setting.values():
        for r in sorted(rows.values(), key=lambda r: r["variant"] != "no_spec"):
            if id(r) not in seen:
                seen.add(id(r))
                out.append(r)
    return out


def settings_from(args) -> list[Setting]:
    """``--settings``, ``--full``'s grid, or the one setting the legacy ``--speculative-*`` options name
    (gpu_check.py passes them)."""
    legacy = (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens)
    given = [name for name, on in (("--settings", args.settings), ("--full", getattr(args, "full", False)),
                                   ("the --speculative-* options", any(v is not None for v in legacy))) if on]
    if len(given) > 1:
        raise ValueError(f"give one of {' and '.join(given)}, not both")
    if any(v is not None for v in legacy):
        return [(legacy[0] or 1, legacy[1] or 1, legacy[2] or 2)]
    if getattr(args, "full", False):
        return list(FULL_SETTINGS)
    return [parse_setting(s) for s in args.settings] if args.settings else list(DEFAULT_SETTINGS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Accept length, accept rate and tok/s through real SGLang servers.")
    ap.add_argument("--fixture", action="append", default=None,
                    help="a bundled fixture's name (fixtures/specs.py) or a fixture dir (target/, draft/, "
                    f"fixture.json); repeatable; default: {' '.join(DEFAULT_FIXTURES)}")
    ap.add_argument("--target", help="target model dir (with --draft: one run on these instead of a fixture)")
    ap.add_argument("--draft", help="EAGLE-3 draft dir with eagle3_manifest.json (default: FIXTURE/--draft-name)")
    ap.add_argument("--draft-name", default=DEFAULT_DRAFT_NAME,
                    help=f"which draft of each fixture (default {DEFAULT_DRAFT_NAME}: its depth-capable draft; "
                    "draft: its one-step draft)")
    ap.add_argument("--prompts", help="JSON list of token-id lists (default: drawn from the fixture's language)")
    ap.add_argument("--num-prompts", type=int, default=120, help="default 120; make demo runs 48, the CI gate 64 "
                    "(docs/benchmarks.md: the gate sized by its statistics)")
    ap.add_argument("--prompt-seed", type=int, default=20261129)
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="default: len(prompt) - 2, at least the fixture language's answer length plus EOS")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--tp-size", type=int, default=1)
    ap.add_argument("--settings", nargs="+", metavar="STEPS,TOPK,TOKENS",
                    help="speculative settings, each steps,topk,draft tokens; default: "
                    + " ".join(map(setting_label, DEFAULT_SETTINGS)))
    ap.add_argument("--full", action="store_true",
                    help="the full grid of settings: " + " ".join(map(setting_label, FULL_SETTINGS)))
    ap.add_argument("--start-jobs", type=int, default=1,
                    help="start up to this many servers at once, then measure them one at a time (default 1)")
    ap.add_argument("--speculative-num-steps", type=int, default=None, help="with the next two: one setting")
    ap.add_argument("--speculative-eagle-topk", type=int, default=None)
    ap.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    ap.add_argument("--server-arg", action="append", default=[], help="extra launch_server argument (repeatable)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--log-dir", default=None)
    lim = Limits()
    ap.add_argument("--gate", action="store_true", help="exit 1 unless, for every fixture and setting, SGLang ran the "
                    f"setting asked for, the manifest's first-position acceptance >= offline - {lim.offline}, its "
                    f"acceptance at every position >= stock's + {lim.position}, its accept rate >= stock's + "
                    f"{lim.rate} and accept length >= stock's + {lim.length}, every variant's greedy output equals "
                    "no_spec's, and each EAGLE-3 variant drafted >= --min-drafts")
    ap.add_argument("--min-drafts", type=int, default=500,
                    help="default 500: what 64 prompts give the bundled depth-capable drafts at 3,1,4 (about 555), "
                    "less 10%% (docs/benchmarks.md: the gate sized by its statistics)")
    args = ap.parse_args(argv)
    try:
        runs = fixture_runs(args.fixture, args.target, args.draft)
        settings = settings_from(args)
    except ValueError as e:
        ap.error(str(e))
    if args.gate and not {"stock", "manifest"} <= set(args.variants.split(",")):
        ap.error("--gate compares stock with manifest: keep both in --variants")
    if args.start_jobs < 1:
        ap.error("--start-jobs must be at least 1")
    target_arg, draft_arg = args.target, args.draft
    models = {label: (Path(target_arg or Path(fixture) / "target"),
                      Path(draft_arg or Path(fixture) / args.draft_name)) for label, fixture in runs}
    for _, draft in models.values():
        if not (draft / "config.json").is_file():
            ap.error(f"{draft}: no draft there (no config.json); --draft-name names a draft directory of each "
                     "fixture (draft-ttt, draft), or give --draft DIR with one --fixture")
    if args.log_dir is None:
        import tempfile

        args.log_dir = tempfile.mkdtemp(prefix="bench_e2e_")
    Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    print(f"[bench_e2e] server logs in {args.log_dir}", flush=True)
    try:
        import torch

        device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else f"cpu ({os.cpu_count()} cores)"
    except Exception as e:  # noqa: BLE001 - the device name is informational only; say why it is missing
        device_name = f"{args.device} (name unavailable: {e})"
    by_fixture: dict[str, dict[str, dict[str, dict]]] = {}
    t0 = time.time()
    for label, fixture in runs:
        args.fixture, args.fixture_mode = fixture, target_arg is None
        args.target, args.draft = models[label]
        by_fixture[label] = run_fixture(args, label, settings)
        for r in rows_of(by_fixture[label]):
            r.update(sglang_version=metadata.version("sglang"), device=device_name, tp_size=args.tp_size,
                     draft=_shown(args.draft) if r["variant"] != "no_spec" else None)
    rows = [r for by_setting in by_fixture.values() for r in rows_of(by_setting)]
    write_results(rows, Path(args.out_dir))
    print(format_table(rows))
    print(f"[bench_e2e] {len(rows)} runs in {time.time() - t0:.0f} s", flush=True)
    if args.gate:
        problems = gate_fixtures(by_fixture, Limits(min_drafts=args.min_drafts))
        for p in problems:
            print(f"[bench_e2e] GATE FAILED: {p}", file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
