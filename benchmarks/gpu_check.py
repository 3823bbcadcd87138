"""One-command GPU check: the capture and its first-batch self-check where CUDA graphs, torch.compile and fused
kernels run, then the end-to-end benchmark and the capture overhead; results under benchmarks/results/gpu/<device>/.

    python benchmarks/gpu_check.py                 # on a CUDA machine (about 6-8 min on one H200, no network)
    python benchmarks/gpu_check.py --dry-run       # its plumbing on CPU, CUDA-only steps skipped (about 5 min)

Stages (each recorded as ok / failed / skipped with the reason, in ``gpu_check.json`` and ``summary.md``):

1. ``standin`` (torch, and triton when present; no SGLang needed): the package's real self-check
   (core/sglang/selfcheck.py) and FcFeed on a DeepSeek-shaped torch model (benchmarks/selfcheck_standin.py) whose
   norms add the residual in place with a Triton kernel of flashinfer's FusedAddRMSNorm arithmetic: the operand
   reference is bit-equal to the kernel's residual in bf16; a correct capture passes on the module-norm and on
   the fused all-reduce-norm path; a permuted one is refused; the check is not run inside ``torch.cuda.graph``
   capture nor while ``torch.compile`` traces, causes no recompilation, and the forward after it runs the same
   aten ops and replays a graph captured before it to the same bits; its cost at DeepSeek-V3 width.
2. ``sglang`` (needs SGLang): the bundled fixture (fixtures/tiny, a 7-layer DeepSeek-V3 target and its EAGLE-3
   draft, built locally by fixtures/build_fixture.py, nothing downloaded) through ``sglang.Engine`` with CUDA
   graphs on the default attention backend, EAGLE-3 chain (3 steps, topk 1, 4 draft tokens) and tree (3 steps,
   topk 4, 8 draft tokens), ``--enable-torch-compile`` off and on, the self-check on (its INFO line per rank
   required), the capture dump compared with HF transformers (every fc chunk is the HF hidden state its layer
   id names and no other), accept length recorded.
3. ``bench``: benchmarks/bench_e2e.py (no_spec / stock / manifest: accept length, accept rate, output tok/s) with
   the tree settings, and benchmarks/bench_capture_overhead.py (the capture overhead ratio).

``--dry-run`` runs the same plumbing on CPU: the stand-in at small sizes (graph and compile items skipped), one
SGLang case in the only shape the CPU runtime serves (chain, 1 step, topk 1, 2 draft tokens, no CUDA graphs, no
torch.compile), and both benchmarks reduced (the manifest server only; 3 short rounds). Exit status 0 when nothing
failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks"
FIXTURE = ROOT / "fixtures" / "tiny"
SELFCHECK_PASSED = "eagle3-capture self-check passed"

CASES = {  # name -> (speculative settings, enable_torch_compile)
    "chain": (dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4), False),
    "tree": (dict(speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=8), False),
    "chain+compile": (dict(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4), True),
    "tree+compile": (dict(speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=8), True),
}
CPU_CASE = {"chain (CPU runtime shape)": (dict(speculative_num_steps=1, speculative_eagle_topk=1,
                                                speculative_num_draft_tokens=2), False)}


class Report:
    """What ran, what it found, how long it took; written as JSON and as a short markdown summary."""

    def __init__(self, out: Path, meta: dict, budget_s: float):
        self.out, self.meta, self.items, self.t0, self.budget_s = out, meta, [], time.monotonic(), budget_s

    def left_s(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def put(self, stage: str, name: str, status: str, details=None, seconds: float | None = None) -> None:
        self.items.append({"stage": stage, "item": name, "status": status, "details": details,
                           "seconds": None if seconds is None else round(seconds, 2)})
        mark = {"ok": "OK  ", "failed": "FAIL", "skipped": "SKIP"}[status]
        print(f"{mark} {stage}/{name}: {json.dumps(details, default=str)[:400]}", flush=True)

    def check(self, stage: str, name: str, good: bool, details=None, seconds=None) -> bool:
        self.put(stage, name, "ok" if good else "failed", details, seconds)
        return good

    def failed(self) -> list[dict]:
        return [i for i in self.items if i["status"] == "failed"]

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        doc = {**self.meta, "wall_s": round(time.monotonic() - self.t0, 1), "all_ok": not self.failed(),
               "items": self.items}
        (self.out / "gpu_check.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
        lines = [f"# GPU check on {self.meta['device']}", "",
                 f"{'dry run (CPU plumbing, CUDA-only steps skipped)' if self.meta['dry_run'] else 'full run'}; "
                 f"torch {self.meta['torch']}, sglang {self.meta['sglang']}, wall {doc['wall_s']} s, "
                 f"{'all ok' if doc['all_ok'] else f'{len(self.failed())} FAILED'}", "",
                 "| stage | item | status | details |", "|---|---|---|---|"]
        for i in self.items:
            d = json.dumps(i["details"], default=str)
            lines.append(f"| {i['stage']} | {i['item']} | {i['status']} | {d[:160].replace('|', '/')} |")
        (self.out / "summary.md").write_text("\n".join(lines) + "\n")


def device_name(dry_run: bool) -> str:
    import torch

    if not dry_run and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def sglang_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------- 1. stand-in


def stage_standin(report: Report, dry_run: bool) -> None:
    import torch

    sys.path.insert(0, str(HERE))
    import selfcheck_standin as si

    from sglang_eagle3_capture.core import selfcheck as check_core
    from sglang_eagle3_capture.core.errors import DeploymentError
    from sglang_eagle3_capture.core.sglang import selfcheck

    cuda = torch.cuda.is_available() and not dry_run
    dev = "cuda" if cuda else "cpu"
    stage = "standin"

    def run(stack, ids):
        with torch.no_grad():
            return si.Runner(stack).forward(si.batch(ids))

    # 1. the operand reference against an in-place fused add+RMSNorm kernel, bf16
    with torch.no_grad():
        h = 7168 if cuda else 96
        x = torch.randn(4096 if cuda else 64, h, device=dev).mul(3).to(torch.bfloat16)
        r = torch.randn_like(x).mul(20)
        want = (x.float() + r.float()).to(torch.bfloat16)
        got = r.clone()
        si.fused_add_rmsnorm_(x.clone(), got, torch.ones(h, device=dev, dtype=torch.bfloat16), kernel=cuda)
        report.check(stage, "operand_reference_equals_the_fused_kernel_residual_bf16", torch.equal(want, got),
                     {"kernel": "triton (FusedAddRMSNorm arithmetic)" if cuda else "torch (no CUDA)",
                      "max_ulp": check_core.difference(got, want)[1]})
        if not cuda and si.triton is not None and os.environ.get("TRITON_INTERPRET") == "1":
            got = r.clone()  # the kernel's code, interpreted (numpy emulates the bf16 casts: within one ulp)
            si.fused_add_rmsnorm_(x.clone(), got, torch.ones(h, device=dev, dtype=torch.bfloat16), kernel=True)
            ulps = check_core.difference(got, want)[1]
            report.check(stage, "interpreted_triton_kernel_within_the_bound", ulps <= check_core.ULP_BOUND,
                         {"max_ulp": ulps})

    # 2. passes, bit for bit, on both paths and dtypes; 3. a permuted capture is refused
    for dtype in (torch.float32, torch.bfloat16):
        for fused in (False, True):
            stack = si.build(dtype=dtype, device=dev, fused=fused)
            si.arm(stack)
            t = time.perf_counter()
            run(stack, torch.arange(3, 40, device=dev))
            report.check(stage, f"passes_{str(dtype)[6:]}_{'fused_allreduce_norm' if fused else 'module_norms'}",
                         selfcheck.pending() == (), {"ms": round((time.perf_counter() - t) * 1e3, 2)})
            selfcheck.disarm()
    stack = si.build(dtype=torch.bfloat16, device=dev)
    feed = stack._eagle3_capture_feed
    order = list(feed.plan.chunk_order)
    order[0], order[1] = order[1], order[0]
    import dataclasses

    feed.plan = dataclasses.replace(feed.plan, chunk_order=tuple(order))
    si.arm(stack)
    try:
        run(stack, torch.arange(3, 40, device=dev))
        report.check(stage, "permuted_capture_refused", False, "not detected")
    except DeploymentError as e:
        report.check(stage, "permuted_capture_refused", "it is layer id" in e.problem, e.problem[:300])
    selfcheck.disarm()

    def hooks(m):
        return sum(len(x._forward_hooks) + len(x._forward_pre_hooks) for x in m.modules())

    stack = si.build(dtype=torch.bfloat16, device=dev)
    ids = torch.arange(3, 11, device=dev)
    base_hooks = hooks(stack)
    # 4. not run inside CUDA-graph capture (SGLang's warm-ups and captures call the model, not ModelRunner.forward)
    graph = None
    if cuda:
        si.arm(stack)
        static = si.batch(ids.clone())
        with torch.no_grad():
            for _ in range(2):
                stack(static.input_ids, static.positions, static)  # eager warm-ups, as SGLang's graph runners do
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                g_out = stack(static.input_ids, static.positions, static)
        still = len(selfcheck.pending()) == 1 and hooks(stack) == base_hooks
        report.check(stage, "not_run_during_graph_capture", still, {"pending": len(selfcheck.pending())})
        selfcheck.disarm()
    else:
        report.put(stage, "not_run_during_graph_capture", "skipped", "needs CUDA")
    # 5. torch.compile: traced without the check; no recompilation once it has run and left
    if cuda:
        try:
            import torch._dynamo as dynamo
            from torch._dynamo.utils import counters

            dynamo.reset()
            counters.clear()
            si.arm(stack)
            compiled = torch.compile(stack, fullgraph=True, dynamic=False)
            fb = si.batch(ids)
            with torch.no_grad():
                compiled(fb.input_ids, fb.positions, fb)
                graphs_1 = counters["stats"].get("unique_graphs", 0)
                run(stack, ids)  # the real (eager) batch runs and passes the check
                compiled(fb.input_ids, fb.positions, fb)
                compiled(fb.input_ids, fb.positions, fb)
            graphs_2 = counters["stats"].get("unique_graphs", 0)
            report.check(stage, "torch_compile_unaffected", selfcheck.pending() == () and graphs_1 == graphs_2,
                         {"unique_graphs_before": graphs_1, "after": graphs_2})
        except Exception as e:  # noqa: BLE001
            report.put(stage, "torch_compile_unaffected", "failed", f"{type(e).__name__}: {e}"[:300])
        selfcheck.disarm()
    else:
        report.put(stage, "torch_compile_unaffected", "skipped", "needs CUDA (inductor)")
    # 6. the forward after the check: the same aten ops, the same bits, the graph replays the same
    with si.AtenOps() as before:
        a = run(stack, ids)
    si.arm(stack)
    b = run(stack, ids)
    with si.AtenOps() as after:
        c = run(stack, ids)
    report.check(stage, "ops_after_equal_ops_before", before.ops == after.ops and hooks(stack) == base_hooks,
                 {"aten_ops": len(before.ops)})
    report.check(stage, "outputs_unchanged", torch.equal(a[1], b[1]) and torch.equal(a[1], c[1]))
    if graph is not None:
        graph.replay()
        torch.cuda.synchronize()
        report.check(stage, "graph_captured_before_replays_the_same", torch.equal(g_out[1], run(stack, ids)[1]))
    # 7. cost at DeepSeek-V3 width
    sizes = [8, 512, 4096] if cuda else [8, 64]
    big = si.build(vocab=4096 if cuda else 256, hidden=7168 if cuda else 96, n_layers=8 if cuda else 7,
                   layer_ids=(3, -1, 7 if cuda else 6, 0), dtype=torch.bfloat16, device=dev)
    for t in sizes:
        ids = torch.randint(0, 256, (t,), device=dev)

        def timed(fn, reps=10 if cuda else 3):
            fn()
            out = []
            for _ in range(reps):
                if cuda:
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                if cuda:
                    torch.cuda.synchronize()
                out.append(time.perf_counter() - t0)
            return statistics.median(out)

        plain = timed(lambda: run(big, ids))
        checked = timed(lambda: (si.arm(big), run(big, ids)))
        fc = run(big, ids)[1]
        chunks = list(fc.split(fc.shape[-1] // 4, dim=-1))
        permute = timed(lambda: torch.cat([chunks[i] for i in (2, 0, 3, 1)], dim=-1))
        report.put(stage, f"cost_T{t}", "ok", {"plain_ms": round(plain * 1e3, 3), "checked_ms": round(checked * 1e3, 3),
                                               "once_extra_ms": round((checked - plain) * 1e3, 3),
                                               "fcfeed_permute_us": round(permute * 1e6, 1),
                                               "hidden": big.layers[0].mlp.in_features})
    selfcheck.disarm()


# ---------------------------------------------------------------------------------------------- 2. SGLang


def _engine_kwargs(spec: dict, compile_: bool, dry_run: bool) -> dict:
    common = dict(model_path=str(FIXTURE / "target"), speculative_algorithm="EAGLE3",
                  speculative_draft_model_path=str(FIXTURE / "draft"), skip_tokenizer_init=True, random_seed=0,
                  log_level="info", max_total_tokens=8192, **spec)
    if dry_run:
        return {**common, "device": "cpu", "attention_backend": "torch_native", "disable_cuda_graph": True,
                "dtype": "float32", "mem_fraction_static": 0.05}
    return {**common, "dtype": "bfloat16", "mem_fraction_static": 0.3, "cuda_graph_max_bs": 8,
            "enable_torch_compile": compile_, "torch_compile_max_bs": 4}


def _child_env(dry_run: bool, extra: dict) -> dict:
    env = dict(os.environ)
    if dry_run:
        sys.path.insert(0, str(ROOT / "cpu_runtime"))
        import sglang_cpu_patches

        env = sglang_cpu_patches.cpu_env(env)
    env["PYTHONPATH"] = os.pathsep.join([env.get("PYTHONPATH", ""), str(ROOT)]).strip(os.pathsep)
    env.pop("SGLANG_PLUGINS", None)  # every installed plugin: this package's among them
    env.update(extra)
    return env


def worker(spec_path: str) -> None:
    """``--engine-case SPEC``: one sglang.Engine run (a fresh process, as SGLang needs), its result as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    import sglang

    t0 = time.perf_counter()
    engine = sglang.Engine(**spec["engine_kwargs"])
    try:
        t1 = time.perf_counter()
        outs = engine.generate(input_ids=spec["prompts"], sampling_params=spec["sampling_params"])
        t2 = time.perf_counter()
        info = engine.get_server_info()
    finally:
        engine.shutdown()
    Path(spec["result"]).write_text(json.dumps({
        "startup_s": t1 - t0, "generate_s": t2 - t1, "server_info": info,
        "outputs": [{"output_ids": o["output_ids"], "meta_info": o["meta_info"]} for o in outs]}, default=repr))


def _hf_reference(device: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(FIXTURE / "target"), dtype=torch.float32).to(device).eval()

    @torch.no_grad()
    def states(prompt):
        seen = {}
        hook = model.model.norm.register_forward_pre_hook(lambda m, a: seen.__setitem__("x", a[0][0].clone()))
        try:
            hs = model(torch.tensor([prompt], device=device), output_hidden_states=True).hidden_states
        finally:
            hook.remove()
        return [h[0] for h in hs[:-1]] + [seen["x"]]  # [0] embedding, [k+1] output of layer k (pre-norm at N)

    return states


def _compare_dump(dump: Path, prompts: list, states, dtype) -> dict:
    """Every dumped batch that holds one of ``prompts``: each fc chunk against HF's hidden state of its layer id
    (the best-matching HF index must be the named one)."""
    import torch
    from safetensors.torch import load_file

    from sglang_eagle3_capture.core.layer_ids import hidden_state_index

    checked, worst, wrong = 0, 0.0, []
    for meta_path in sorted(p.with_suffix(".json") for p in dump.glob("*.safetensors")):  # batches, not the report
        meta = json.loads(meta_path.read_text())
        t = load_file(str(meta_path.with_suffix(".safetensors")))
        ids, aux = t["input_ids"].tolist(), t["aux_hidden_states"]
        layer_ids = meta["layer_ids"]
        h = aux.shape[-1] // len(layer_ids)
        start = 0
        while start < len(ids):
            p = next((p for p in prompts if ids[start:start + len(p)] == p), None)
            if p is None or meta.get("forward_mode") not in ("EXTEND", "MIXED"):
                break
            hf = states(p)
            rows = aux[start:start + len(p)].float().to(hf[0].device)
            for j, lid in enumerate(layer_ids):
                chunk = rows[:, j * h:(j + 1) * h]
                cos = [torch.nn.functional.cosine_similarity(chunk.flatten(), x.flatten(), dim=0).item() for x in hf]
                best = max(range(len(cos)), key=cos.__getitem__)
                expected = hidden_state_index(lid)
                err = ((chunk - hf[expected]).abs().max() / hf[expected].abs().max().clamp_min(1e-6)).item()
                worst = max(worst, err)
                if best != expected or (dtype == "float32" and err > 1e-4) or (lid == -1 and err > 1e-2):
                    wrong.append({"batch": meta_path.stem, "chunk": j, "layer_id": lid, "best_hf_index": best,
                                  "rel_err": err})
            checked += 1
            start += len(p)
    return {"prompt_rows_compared": checked, "worst_rel_err": worst, "wrong": wrong[:5]}


def stage_sglang(report: Report, dry_run: bool, out: Path, prompts: list) -> None:
    import torch

    stage = "sglang"
    if sglang_version() is None:
        report.put(stage, "all", "skipped", "SGLang is not installed here (e.g. the lent H200): stage 1 stands in")
        return
    if not dry_run and not torch.cuda.is_available():
        report.put(stage, "all", "skipped", "no CUDA device (use --dry-run for the CPU plumbing)")
        return
    cases = CPU_CASE if dry_run else CASES
    if dry_run:
        report.put(stage, "cuda_graphs_tree_torch_compile", "skipped", "CUDA-only: the CPU runtime serves the chain "
                   "(1 step, topk 1, 2 draft tokens) without CUDA graphs or torch.compile")
    states = _hf_reference("cpu" if dry_run else "cuda")
    for name, (spec, compile_) in cases.items():
        if report.left_s() < 60:
            report.put(stage, name, "skipped", "time budget spent")
            continue
        case_dir = out / "cases" / slug(name)
        case_dir.mkdir(parents=True, exist_ok=True)
        dump = case_dir / "dump"
        kwargs = _engine_kwargs(spec, compile_, dry_run)
        spec_file = case_dir / "spec.json"
        spec_file.write_text(json.dumps({"engine_kwargs": kwargs, "prompts": prompts,
                                         "result": str(case_dir / "result.json"),
                                         "sampling_params": {"temperature": 0.0, "max_new_tokens": 16,
                                                             "ignore_eos": True}}))
        env = _child_env(dry_run, {"SGLANG_EAGLE3_CAPTURE_DUMP": str(dump), "SGLANG_EAGLE3_CAPTURE_DUMP_MAX": "64",
                                   "SGLANG_EAGLE3_CAPTURE_SELFCHECK": "1"})
        t0 = time.monotonic()
        log = case_dir / "engine.log"
        with open(log, "wb") as f:
            try:
                rc = subprocess.run([sys.executable, __file__, "--engine-case", str(spec_file)], env=env, stdout=f,
                                    stderr=subprocess.STDOUT, timeout=max(60, min(300, report.left_s()))).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        text = log.read_text(errors="replace")
        passed = [line[line.index(SELFCHECK_PASSED):][:300] for line in text.splitlines() if SELFCHECK_PASSED in line]
        if rc != 0:
            report.put(stage, name, "failed", {"rc": rc, "log_tail": text[-1500:]}, time.monotonic() - t0)
            continue
        result = json.loads((case_dir / "result.json").read_text())
        metas = [o["meta_info"] for o in result["outputs"]]
        verify = sum(m.get("spec_verify_ct", 0) for m in metas)
        completion = sum(m.get("completion_tokens", 0) for m in metas)
        cmp = _compare_dump(dump, prompts, states, kwargs["dtype"])
        details = {"selfcheck_info_lines": len(passed), "selfcheck_line": passed[0] if passed else None,
                   "accept_length": round(completion / verify, 3) if verify else None, "dump_vs_hf": cmp,
                   "startup_s": round(result["startup_s"], 1), "engine_kwargs": {k: v for k, v in kwargs.items()
                                                                                  if "path" not in k}}
        good = len(passed) == 1 and verify > 0 and cmp["prompt_rows_compared"] > 0 and not cmp["wrong"]
        report.check(stage, name, good, details, time.monotonic() - t0)


# ---------------------------------------------------------------------------------------------- 3. benchmarks


def stage_bench(report: Report, dry_run: bool, out: Path) -> None:
    import torch

    stage = "bench"
    if sglang_version() is None or (not dry_run and not torch.cuda.is_available()):
        report.put(stage, "all", "skipped", "needs SGLang (and CUDA unless --dry-run)")
        return
    device = "cpu" if dry_run else "cuda"
    e2e = [sys.executable, str(HERE / "bench_e2e.py"), "--device", device, "--fixture", str(FIXTURE),
           "--out-dir", str(out / "e2e"), "--log-dir", str(out / "e2e" / "logs")]
    tree = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
    e2e += (["--num-prompts", "8", "--variants", "manifest", "--settings", "1,1,2"] if dry_run
            else ["--num-prompts", "480", *tree])
    overhead = [sys.executable, str(HERE / "bench_capture_overhead.py"), "--device", device,
                "--out-dir", str(out / "overhead")] + (["--rounds", "3", "--tokens", "128"] if dry_run else [])
    for name, cmd, result in (("e2e", e2e, out / "e2e" / "e2e.json"),
                              ("capture_overhead", overhead, out / "overhead" / "capture_overhead.json")):
        if report.left_s() < 45:
            report.put(stage, name, "skipped", "time budget spent")
            continue
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, env=_child_env(False, {}), capture_output=True, text=True,
                                  timeout=max(45, report.left_s()))
        except subprocess.TimeoutExpired:
            report.put(stage, name, "failed", "timed out", time.monotonic() - t0)
            continue
        if proc.returncode != 0 or not result.exists():
            report.put(stage, name, "failed", {"rc": proc.returncode, "tail": (proc.stdout + proc.stderr)[-1500:]},
                       time.monotonic() - t0)
            continue
        rows = json.loads(result.read_text())
        keep = ("variant", "accept_length", "accept_rate", "output_tok_per_s") if name == "e2e" else \
            ("manifest_ids", "ratio_p50", "ratio_p20", "ratio_p80")
        report.put(stage, name, "ok", [{k: r.get(k) for k in keep} for r in rows], time.monotonic() - t0)


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU plumbing; CUDA-only steps skipped")
    ap.add_argument("--out", help="results directory (default: benchmarks/results/gpu/<device>)")
    ap.add_argument("--stages", default="standin,sglang,bench")
    ap.add_argument("--budget-s", type=float, default=460, help="stop starting new steps after this many seconds")
    ap.add_argument("--engine-case", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.engine_case:
        worker(args.engine_case)
        return 0
    sys.path.insert(0, str(ROOT))
    import torch

    device = device_name(args.dry_run)
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / "gpu" / slug(device)
    meta = {"device": device, "dry_run": args.dry_run, "torch": torch.__version__, "sglang": sglang_version(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "cuda": torch.version.cuda, "stages": args.stages}
    report = Report(out, meta, args.budget_s)
    prompts = json.loads((FIXTURE / "prompts.json").read_text())[:4]
    stages = {"standin": lambda: stage_standin(report, args.dry_run),
              "sglang": lambda: stage_sglang(report, args.dry_run, out, prompts),
              "bench": lambda: stage_bench(report, args.dry_run, out)}
    for name in args.stages.split(","):
        t0 = time.monotonic()
        try:
            stages[name]()
        except Exception as e:  # noqa: BLE001 - one stage's crash is a result, the others still run
            report.put(name, "stage", "failed", f"{type(e).__name__}: {e}"[:600])
        print(f"stage {name}: {time.monotonic() - t0:.1f} s", flush=True)
        report.write()
    report.write()
    print(f"results: {out}/gpu_check.json, summary.md; {'ALL OK' if not report.failed() else 'FAILURES'}")
    return 0 if not report.failed() else 1


if __name__ == "__main__":
    sys.exit(main())
