"""Atomic, concurrency-safe writes (userfiles.write_file_atomic / atomic_directory) through the command line.

- several ``manifest write --force`` processes and a reader at once: every read is one writer's complete manifest,
  never a torn or mixed file, and no writer fails;
- ``convert`` into one DST from several processes at once: one wins, the others exit 2 naming DST, DST is one
  draft's complete copy, and no temporary directory is left;
- ``kill -9`` during ``convert``: DST never appears; the hidden temporary directory it leaves stays (accepted: nothing
  reaps it) and the next ``convert`` into DST succeeds beside it;
- files and directories get the mode the umask gives a plain ``open``/``mkdir``.

Processes are forked from the test process (the command runs through ``cli.main``, as the console script does).
"""

import contextlib
import io
import json
import multiprocessing
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from sglang_eagle3_capture.core.userfiles import TEMP_DIR_PREFIX, write_file_atomic
from support.hostile_inputs import FIXTURE, run_cli
from support.speculators_drafts import build_speculators_draft, write_target

M = "eagle3_manifest.json"
WRITERS = 4
SECONDS = 3.0
IDS = [[-1, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6]]


def _quiet_main(argv) -> int:
    from sglang_eagle3_capture.doctor import cli

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = cli.main([str(a) for a in argv])
    if rc != 0:
        print(f"writer failed ({rc}): {err.getvalue()}", flush=True)
    return rc


def _writer(draft: str, target: str, ids: list[int], seconds: float, failures) -> None:
    end = time.monotonic() + seconds
    runs = 0
    while time.monotonic() < end:
        rc = _quiet_main(["manifest", "write", draft, f"--layer-ids={','.join(map(str, ids))}", "--target", target,
                          "--force", "--note", "x" * 2000])  # a long note: a torn read would show
        runs += 1
        if rc != 0:
            failures.put((ids, rc))
    failures.put(("runs", runs))


@pytest.fixture
def draft(tmp_path):
    d = tmp_path / "draft"
    shutil.copytree(FIXTURE / "draft", d)
    return d


def test_concurrent_manifest_writers_and_a_reader(draft):
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(str(draft), str(FIXTURE / "target"), IDS[i], SECONDS, results))
               for i in range(WRITERS)]
    for w in writers:
        w.start()
    reads, seen, bad = 0, set(), []
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        try:
            text = (draft / M).read_text()
        except FileNotFoundError:  # never: os.replace swaps the name atomically
            bad.append("missing")
            continue
        reads += 1
        try:
            doc = json.loads(text)
            seen.add(tuple(doc["layer_ids"]))
            assert doc["provenance"]["note"] == "x" * 2000 or doc["provenance"]["source"] != "manual"
        except (ValueError, KeyError, AssertionError) as e:
            bad.append(f"{type(e).__name__}: {text[:80]!r}")
    for w in writers:
        w.join(60)
    outcomes = []
    while not results.empty():
        outcomes.append(results.get())
    runs = sum(n for tag, n in outcomes if tag == "runs")
    failed = [o for o in outcomes if o[0] != "runs"]
    assert all(w.exitcode == 0 for w in writers) and failed == []
    assert bad == [], f"{len(bad)} of {reads} reads saw a torn or missing manifest: {bad[:3]}"
    assert runs >= WRITERS and reads > 0 and seen, (runs, reads, seen)
    print(f"{runs} manifest writes by {WRITERS} processes and {reads} reads in {SECONDS} s: none torn, none failed")
    assert seen <= {tuple(i) for i in IDS[:WRITERS]} | {(-1, 0, 1)}
    leftovers = [p.name for p in draft.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == [], f"temporary files left behind: {leftovers}"


def _convert(src: str, dst: str, target: str, go, results) -> None:
    go.wait()
    from sglang_eagle3_capture.doctor import cli

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = cli.main(["convert", src, dst, "--target", target])
    results.put((src, rc, err.getvalue()))


@pytest.fixture(scope="module")
def spec_drafts(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    return ([build_speculators_draft(root / f"draft{i}", seed=i) for i in range(3)], write_target(root / "kimi"))


def test_concurrent_converts_into_one_dst(spec_drafts, tmp_path):
    drafts, target = spec_drafts
    ctx = multiprocessing.get_context("fork")
    for attempt in range(3):
        dst = tmp_path / f"out{attempt}"
        go, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_convert, args=(str(d), str(dst), str(target), go, results)) for d in drafts]
        for p in procs:
            p.start()
        go.set()
        for p in procs:
            p.join(120)
        outcomes = [results.get(timeout=10) for _ in procs]
        won = [o for o in outcomes if o[1] == 0]
        lost = [o for o in outcomes if o[1] != 0]
        assert all(p.exitcode == 0 for p in procs), "a convert process crashed"
        assert len(won) == 1, outcomes
        for _, rc, err in lost:
            assert rc == 2 and err.count("\n") == 1 and str(dst) in err and "fix:" in err, err
        # DST is the winner's complete copy: its manifest provenance names the winner's config, its weights load
        winner = Path(won[0][0])
        manifest = json.loads((dst / M).read_text())
        assert manifest["provenance"]["file"] == str((winner / "config.json").resolve())
        assert {"config.json", M, "model.safetensors"} <= {p.name for p in dst.iterdir()}
        assert "fc.weight" in load_file(str(dst / "model.safetensors"))
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(TEMP_DIR_PREFIX)] == []


def _convert_then_hang(src: str, dst: str, target: str) -> None:
    from sglang_eagle3_capture.doctor import convert as convert_module

    def hang(*args, **kwargs):  # the weights are written; the process is killed before the manifest
        time.sleep(120)

    convert_module.write_manifest = hang
    _quiet_main(["convert", src, dst, "--target", target])


def test_kill_9_during_convert_leaves_no_dst_and_the_next_run_succeeds(spec_drafts, tmp_path):
    drafts, target = spec_drafts
    dst = tmp_path / "out"
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_convert_then_hang, args=(str(drafts[0]), str(dst), str(target)))
    p.start()
    deadline = time.monotonic() + 60
    temp = []
    while time.monotonic() < deadline and not temp:
        temp = [t for t in tmp_path.iterdir() if t.name.startswith(TEMP_DIR_PREFIX) and (t / "config.json").exists()]
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    assert temp, "convert never created its temporary directory"
    assert not dst.exists(), "DST must not appear before the copy is complete"
    r = run_cli(["convert", drafts[0], dst, "--target", target])
    assert r.rc == 0, r.err
    assert (dst / M).exists() and temp[0].exists()  # the killed run's hidden leftover is not reaped


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_written_files_follow_the_umask(spec_drafts, draft, tmp_path, mask):
    drafts, target = spec_drafts
    old = os.umask(mask)
    try:
        dst = tmp_path / "out"
        assert run_cli(["convert", drafts[0], dst, "--target", target]).rc == 0
        assert run_cli(["manifest", "write", draft, "--layer-ids=-1,0,1", "--target", FIXTURE / "target",
                        "--force"]).rc == 0
        single = write_file_atomic(tmp_path / "plain.json", "{}")
    finally:
        os.umask(old)
    want_file, want_dir = 0o666 & ~mask, 0o777 & ~mask
    assert dst.stat().st_mode & 0o777 == want_dir
    for f in [*dst.iterdir(), draft / M, single]:
        assert f.stat().st_mode & 0o777 == want_file, f"{f.name}: {oct(f.stat().st_mode & 0o777)}"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(draft, monkeypatch):
    before = (draft / M).read_bytes()

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    r = run_cli(["manifest", "write", draft, "--layer-ids=0,1,2", "--target", FIXTURE / "target", "--force"])
    assert r.rc == 2 and "no space left on device" in r.err and M in r.err and r.err.count("\n") == 1
    assert (draft / M).read_bytes() == before
    assert [p.name for p in draft.iterdir() if p.name.endswith(".tmp")] == []
