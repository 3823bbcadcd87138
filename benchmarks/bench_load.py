"""Load and faults through a real server: concurrent clients, aborted requests, a failing capture dump, SIGTERM.

One `python -m sglang.launch_server` with EAGLE-3, the plugin and the draft's manifest (started as
benchmarks/bench_e2e.py starts its servers: on CPU, the test-only CPU runtime), on the fixture's bundled prompts:

1. sequential: every prompt, one request at a time (the reference accept rate, per request);
2. concurrent: ``--concurrency`` clients stream the same prompts; ``--abort-fraction`` of the requests (chosen with
   ``--seed``) close their connection after their first streamed chunk and a random delay, mid-generation (a client
   disconnect); the accept rate of the completed requests must equal (within ``--max-rate-diff``) the sequential
   rate of the same prompts;
3. the server log must hold no error besides the one the capture dump logs: the server runs with
   SGLANG_EAGLE3_CAPTURE_DUMP naming a directory that cannot be created, and must log exactly one ERROR for it and
   serve on (a side feature never stops serving); the scheduler must not restart (the server's processes are the
   same before and after, /health_generate answers);
4. SIGTERM mid-load: a second server, dumping to a real directory, gets SIGTERM while the concurrent clients run;
   afterwards no process of it may remain, the dump directory must hold only complete batches (no temporary file),
   and nothing the plugin names may be left in /tmp or /dev/shm.

Writes ``--out-dir``/load.json and load.csv; exits 1 when a check fails. Example::

    python benchmarks/bench_load.py                      # all 400 bundled prompts, 64 clients, 10% aborted
    python benchmarks/bench_load.py --num-prompts 48 --concurrency 16 --out-dir /tmp/load   # the CI-sized run
"""

from __future__ import annotations

import argparse
import csv
import http.client
import json
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from bench_e2e import RESULTS, Server, _free_port, _http, server_cmd, server_env  # noqa: E402

DUMP_ENV = "SGLANG_EAGLE3_CAPTURE_DUMP"
PLUGIN_NAMES = ("sglang-eagle3-capture", "sglang_eagle3_capture", "eagle3-capture", "eagle3_capture",
                ".sglang-eagle3-capture.")
ERROR_RE = re.compile(r"Traceback \(most recent call last\)|\bERROR\b|Exception|\bCRITICAL\b|scheduler.*(died|exit)",
                      re.IGNORECASE)
DUMP_ERROR_RE = re.compile(r"eagle3-capture dump: cannot use the dump directory")
# SGLang's model registry (sglang/srt/models/registry.py) warns for every model file it skips at import; on CPU the
# stub sgl_kernel lacks CUDA-only ops, so several are skipped at every start. Not an error.
REGISTRY_SKIP_RE = re.compile(r"Ignore import error when loading sglang\.srt\.models\.")


def _healthy(url: str) -> bool:
    """``GET /health_generate`` answers 200 (SGLang runs one generation for it; the body is empty)."""
    try:
        with urllib.request.urlopen(url + "/health_generate", timeout=120) as r:
            return r.status == 200
    except OSError:
        return False


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixture", default=str(ROOT / "fixtures" / "tiny"))
    ap.add_argument("--num-prompts", type=int, default=0, help="first N bundled prompts (default: all)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--abort-fraction", type=float, default=0.1)
    ap.add_argument("--max-abort-delay", type=float, default=0.05, help="seconds after the first chunk (random)")
    ap.add_argument("--max-rate-diff", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--sigterm-after", type=float, default=2.0, help="seconds into the load of the SIGTERM server")
    ap.add_argument("--no-sigterm", action="store_true", help="skip the SIGTERM server")
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--out-dir", default=str(RESULTS))
    ap.add_argument("--log-dir", default=None)
    args = ap.parse_args(argv)
    # what bench_e2e.server_cmd reads
    args.target, args.draft = Path(args.fixture) / "target", Path(args.fixture) / "draft"
    args.device, args.tp_size, args.server_arg = "cpu", 1, []
    args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = 1, 1, 2
    args.log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="bench_load_"))
    args.log_dir.mkdir(parents=True, exist_ok=True)
    return args


def _sampling(prompt: list[int]) -> dict:
    return {"max_new_tokens": len(prompt) - 2, "temperature": 0.0}


def _stream(url: str, prompt: list[int], abort_after: float | None, timeout: float = 600.0) -> dict:
    """One streamed request; with ``abort_after`` the connection is closed that many seconds after the first chunk.
    Returns the last ``meta_info`` seen, whether the request finished, and whether it was cut mid-generation."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    body = json.dumps({"input_ids": prompt, "sampling_params": _sampling(prompt), "stream": True})
    conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        return {"status": resp.status, "error": resp.read()[:500].decode(errors="replace")}
    last, chunks, t_first = None, 0, None
    try:
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            last = json.loads(data)
            chunks += 1
            if t_first is None:
                t_first = time.monotonic()
            finished = (last.get("meta_info") or {}).get("finish_reason") is not None
            if abort_after is not None and not finished and time.monotonic() - t_first >= abort_after:
                break
    finally:
        conn.close()  # an aborted request: the client disconnects here
    meta = (last or {}).get("meta_info") or {}
    finished = meta.get("finish_reason") is not None
    return {"status": 200, "meta": meta, "chunks": chunks, "finished": finished,
            "aborted_mid_generation": abort_after is not None and not finished}


def _rate(metas: list[dict]) -> tuple[float | None, int, int]:
    correct = sum(m.get("spec_num_correct_drafts", 0) for m in metas)
    proposed = sum(m.get("spec_num_proposed_drafts", 0) for m in metas)
    return (round(correct / proposed, 4) if proposed else None), correct, proposed


def _group_pids(pgid: int) -> set[int]:
    """Every live process in process group ``pgid`` (the server and its scheduler / detokenizer children)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) == pgid:
                stat = Path(f"/proc/{entry}/stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    out.add(int(entry))
        except (OSError, IndexError):
            continue
    return out


def _log_problems(log: Path, size: int | None = None) -> tuple[list[str], list[str]]:
    """(unexpected error lines, expected dump ERROR lines) of a server log (its first ``size`` bytes)."""
    bad, dump = [], []
    with open(log, "rb") as f:
        text = f.read(size if size is not None else -1).decode(errors="replace")
    for line in text.splitlines():
        if DUMP_ERROR_RE.search(line):
            dump.append(line.strip())
        elif ERROR_RE.search(line) and not REGISTRY_SKIP_RE.search(line):
            bad.append(line.strip())
    return bad, dump


def _concurrent(url: str, prompts: list[list[int]], aborts: dict[int, float], concurrency: int) -> list[dict]:
    with ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(_stream, url, p, aborts.get(i)) for i, p in enumerate(prompts)]
        out = []
        for i, f in enumerate(futures):
            try:
                out.append({"index": i, **f.result()})
            except Exception as e:  # noqa: BLE001 - a failed request is a finding, reported in the results
                out.append({"index": i, "status": None, "error": f"{type(e).__name__}: {e}"})
    return out


def _snapshot(dirs=("/tmp", "/dev/shm")) -> set[str]:
    out = set()
    for d in dirs:
        try:
            out |= {os.path.join(d, n) for n in os.listdir(d)}
        except OSError:
            pass
    return out


def load_run(args, prompts: list[list[int]]) -> dict:
    """Steps 1-3 of the module doc on one server."""
    blocker = args.log_dir / "not-a-directory"
    blocker.write_text("the capture dump cannot create a directory below a file\n")
    env = server_env("manifest", args.device)
    env[DUMP_ENV] = str(blocker / "dump")
    log = args.log_dir / "server_load.log"
    port = _free_port()
    server = Server(server_cmd(args, "manifest", port), env, log, port, args.startup_timeout)
    try:
        before = _group_pids(server.proc.pid)
        t0 = time.perf_counter()
        sequential = [_http(server.url + "/generate", {"input_ids": p, "sampling_params": _sampling(p)})
                      for p in prompts]
        seq_s = time.perf_counter() - t0
        rng = random.Random(args.seed)
        n_abort = max(1, round(args.abort_fraction * len(prompts)))
        aborts = {i: rng.uniform(0, args.max_abort_delay) for i in rng.sample(range(len(prompts)), n_abort)}
        t0 = time.perf_counter()
        concurrent = _concurrent(server.url, prompts, aborts, args.concurrency)
        conc_s = time.perf_counter() - t0
        time.sleep(1.0)  # let the scheduler log what it does with the aborted requests
        healthy = _healthy(server.url)
        after = _group_pids(server.proc.pid)
        alive = server.proc.poll() is None
        served = log.stat().st_size  # what the server logged while serving; close() then kills its process group,
    finally:                         # and its main process logs the scheduler's SIGTERM as a crash: not the load's
        server.close()
    bad_lines, dump_lines = _log_problems(log, served)
    done = [r for r in concurrent if r.get("status") == 200 and r.get("finished")]
    failed = [r for r in concurrent if r.get("status") != 200]
    aborted = [r for r in concurrent if r["index"] in aborts]
    seq_rate, seq_c, seq_p = _rate([o["meta_info"] for o in sequential])
    same_rate, same_c, same_p = _rate([sequential[r["index"]]["meta_info"] for r in done])
    conc_rate, conc_c, conc_p = _rate([r["meta"] for r in done])
    return {
        "prompts": len(prompts), "concurrency": args.concurrency, "sequential_s": round(seq_s, 2),
        "concurrent_s": round(conc_s, 2),
        "aborted": len(aborts), "aborted_mid_generation": sum(1 for r in aborted if r.get("aborted_mid_generation")),
        "completed": len(done), "failed_requests": len(failed), "failures": [r.get("error") for r in failed][:5],
        "completed_not_aborted": sum(1 for r in done if r["index"] not in aborts),
        "accept_rate_sequential_all": seq_rate, "drafts_sequential_all": seq_p,
        "accept_rate_sequential_same_prompts": same_rate, "drafts_sequential_same_prompts": same_p,
        "accept_rate_concurrent": conc_rate, "drafts_concurrent": conc_p,
        "accept_rate_diff": None if conc_rate is None or same_rate is None else round(abs(conc_rate - same_rate), 4),
        "server_error_lines": len(bad_lines), "server_errors": bad_lines[:10],
        "dump_error_lines": len(dump_lines), "dump_error": dump_lines[:1],
        "server_alive_after": alive, "health_after": healthy,
        "processes_before": len(before), "processes_after": len(after), "scheduler_restarts": len(before ^ after),
        "log": str(log),
    }


def sigterm_run(args, prompts: list[list[int]]) -> dict:
    """Step 4 of the module doc."""
    dump = args.log_dir / "dump"
    env = server_env("manifest", args.device)
    env[DUMP_ENV] = str(dump)
    env["SGLANG_EAGLE3_CAPTURE_DUMP_MAX"] = "100000"
    log = args.log_dir / "server_sigterm.log"
    port = _free_port()
    server = Server(server_cmd(args, "manifest", port), env, log, port, args.startup_timeout)
    before_files = _snapshot()
    pgid = server.proc.pid
    group = _group_pids(pgid)
    results: list = []
    clients = threading.Thread(target=lambda: results.extend(_concurrent(server.url, prompts, {}, args.concurrency)),
                               daemon=True)
    clients.start()
    time.sleep(args.sigterm_after)
    in_flight = clients.is_alive()
    os.kill(server.proc.pid, signal.SIGTERM)  # as `kill PID` (or an orchestrator) stops a server
    t0 = time.monotonic()
    try:
        server.proc.wait(timeout=60)
        exit_code = server.proc.returncode
    except Exception:  # noqa: BLE001 - did not stop: reported, then killed
        exit_code = None
    stop_s = time.monotonic() - t0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _group_pids(pgid):
        time.sleep(0.5)
    survivors = sorted(_group_pids(pgid))
    if survivors:
        os.killpg(pgid, signal.SIGKILL)
    server.close()
    clients.join(120)
    new_files = sorted(_snapshot() - before_files)
    plugin_strays = [f for f in new_files if any(n in os.path.basename(f) for n in PLUGIN_NAMES)]
    # batches are the dump directory's files; the startup report sits in its report/ subdirectory
    dump_files = sorted(p.name for p in dump.iterdir() if p.is_file()) if dump.is_dir() else []
    temporaries = sorted({n for n in dump_files if n.endswith(".tmp") or n.startswith(".")}
                         | ({str(p.relative_to(dump)) for p in dump.rglob("*.tmp")} if dump.is_dir() else set()))
    stems = {n.rsplit(".", 1)[0] for n in dump_files if not n.startswith(".")}
    incomplete = [s for s in stems if not {f"{s}.json", f"{s}.safetensors"} <= set(dump_files)]
    unreadable = []
    for s in sorted(stems - set(incomplete)):
        try:
            from safetensors.torch import load_file

            load_file(str(dump / f"{s}.safetensors"))
            json.loads((dump / f"{s}.json").read_text())
        except Exception as e:  # noqa: BLE001 - a torn batch is a finding
            unreadable.append(f"{s}: {type(e).__name__}")
    return {"sigterm_after_s": args.sigterm_after, "load_in_flight_at_sigterm": in_flight,
            "processes_before": len(group), "exit_code": exit_code, "stop_s": round(stop_s, 2),
            "surviving_processes": len(survivors), "dump_batches": len(stems), "dump_temporaries": temporaries,
            "dump_incomplete_batches": incomplete, "dump_unreadable_batches": unreadable,
            "plugin_stray_files": plugin_strays, "other_new_files_in_tmp_shm": new_files[:20],
            "requests_finished_before_stop": sum(1 for r in results if r.get("finished")), "log": str(log)}


def problems(load: dict, term: dict | None, max_rate_diff: float) -> list[str]:
    out = []
    if load["failed_requests"]:
        out.append(f"{load['failed_requests']} requests failed: {load['failures']}")
    if load["server_error_lines"]:
        out.append(f"server log holds {load['server_error_lines']} error lines: {load['server_errors'][:3]}")
    if load["dump_error_lines"] != 1:
        out.append(f"expected exactly one ERROR from the capture dump, got {load['dump_error_lines']}")
    if not (load["server_alive_after"] and load["health_after"]) or load["scheduler_restarts"]:
        out.append("the server or its scheduler did not survive the load")
    if load["completed_not_aborted"] != load["prompts"] - load["aborted"]:
        out.append(f"only {load['completed_not_aborted']} of {load['prompts'] - load['aborted']} requests that were "
                   "not aborted completed")
    if load["accept_rate_diff"] is None or load["accept_rate_diff"] > max_rate_diff:
        out.append(f"accept rate {load['accept_rate_concurrent']} under load vs "
                   f"{load['accept_rate_sequential_same_prompts']} sequential: differs by more than {max_rate_diff}")
    if term is not None:
        if term["surviving_processes"]:
            out.append(f"{term['surviving_processes']} server processes survived SIGTERM")
        for key in ("dump_temporaries", "dump_incomplete_batches", "dump_unreadable_batches", "plugin_stray_files"):
            if term[key]:
                out.append(f"after SIGTERM: {key}: {term[key][:5]}")
    return out


def write_results(load: dict, term: dict | None, found: list[str], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        from importlib import metadata

        version = metadata.version("sglang")
    except Exception:  # noqa: BLE001 - informational
        version = None
    doc = {"sglang_version": version, "device": f"cpu ({os.cpu_count()} cores)", "load": load, "sigterm": term,
           "problems": found, "ok": not found}
    (out_dir / "load.json").write_text(json.dumps(doc, indent=2) + "\n")
    rows = [{"run": "sequential", "prompts": load["prompts"], "concurrency": 1, "completed": load["prompts"],
             "aborted": 0, "accept_rate": load["accept_rate_sequential_all"],
             "proposed_drafts": load["drafts_sequential_all"], "wall_s": load["sequential_s"]},
            {"run": "sequential (prompts completed under load)", "prompts": load["completed"], "concurrency": 1,
             "completed": load["completed"], "aborted": 0, "accept_rate": load["accept_rate_sequential_same_prompts"],
             "proposed_drafts": load["drafts_sequential_same_prompts"], "wall_s": None},
            {"run": "concurrent with aborts", "prompts": load["prompts"], "concurrency": load["concurrency"],
             "completed": load["completed"], "aborted": load["aborted"], "accept_rate": load["accept_rate_concurrent"],
             "proposed_drafts": load["drafts_concurrent"], "wall_s": load["concurrent_s"]}]
    for r in rows:
        r.update(server_error_lines=load["server_error_lines"], scheduler_restarts=load["scheduler_restarts"],
                 sigterm_stray_files=None if term is None else len(term["plugin_stray_files"]) +
                 len(term["dump_temporaries"]) + len(term["dump_incomplete_batches"]))
    with open(out_dir / "load.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    prompts = json.loads((Path(args.fixture) / "prompts.json").read_text())
    if args.num_prompts:
        prompts = prompts[:args.num_prompts]
    print(f"[bench_load] {len(prompts)} prompts, {args.concurrency} clients, logs in {args.log_dir}", flush=True)
    load = load_run(args, prompts)
    term = None if args.no_sigterm else sigterm_run(args, prompts)
    found = problems(load, term, args.max_rate_diff)
    write_results(load, term, found, Path(args.out_dir))
    print(json.dumps({"load": {k: v for k, v in load.items() if k not in ("server_errors", "failures")},
                      "sigterm": term}, indent=2))
    for p in found:
        print(f"[bench_load] FAILED: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
