"""Two TP ranks in two processes joined by SGLang's own parallel runtime (its TP CPU group over gloo, built as a
scheduler process builds it), each reading the draft's manifest on its own when the test lets it, then comparing
what it serves through the plugin's ``core.sglang.target.ranks_agree`` (tests/engine/test_ranks_agree_engine.py).

``run_ranks(draft_dir, cases, prepare, edit)`` starts the two ranks (``multiprocessing`` spawn), and for each case
calls ``prepare(case)``, lets rank 0 read, calls ``edit(case)`` (the test changes the draft's files between the two
reads), lets rank 1 read, and returns ``{case: [outcome of rank 0, outcome of rank 1]}``: ``("passed",)`` or
``("refused", file, field, problem)``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
from pathlib import Path

from harness import ENGINE_DEFAULTS, REPO
from support import subprocess_env

TINY_TARGET = REPO / "fixtures" / "tiny" / "target"
TIMEOUT = 600


def init_tp(rank: int, size: int, port: int) -> None:
    """SGLang's parallel runtime for TP rank ``rank`` of ``size`` in this process, as ``run_scheduler_process``
    builds it: the published server arguments and spawn ranks, then ``bootstrap.init_parallel_runtime`` (0.5.21+)."""
    import harness

    harness.use_cpu_runtime()
    # one core per rank: SGLang's CPU path asserts ranks <= NUMA nodes otherwise
    os.environ.setdefault("SGLANG_CPU_OMP_THREADS_BIND", "|".join(map(str, range(size))))
    from sglang.srt import runtime_context
    from sglang.srt.distributed import bootstrap
    from sglang.srt.server_args import ServerArgs

    sa = ServerArgs(model_path=str(TINY_TARGET), **{**ENGINE_DEFAULTS, "tp_size": size})
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    ranks = runtime_context.SpawnRanks(world_rank=runtime_context.spawn_world_rank(sa, tp_rank=rank, pp_rank=0),
                                       gpu_id=rank)
    runtime_context.publish(sa, role="scheduler", ranks=ranks)
    bootstrap.init_parallel_runtime(server_args=sa, device="cpu", dist_port=port)


def _rank(rank: int, port: int, draft_dir: str, cases: list, go, said) -> None:
    try:
        init_tp(rank, 2, port)
        from sglang_eagle3_capture.core.errors import DeploymentError
        from sglang_eagle3_capture.core.manifest import find_manifest
        from sglang_eagle3_capture.core.sglang import resolution, target

        for case in cases:
            go[rank].get(timeout=TIMEOUT)  # the test says when this rank reads
            manifest = find_manifest(Path(draft_dir))
            resolution._RECORD[:] = [resolution.Resolution(draft_dir, Path(draft_dir), manifest)]
            said.put((case, rank, "read"))
            ids = [0, 2, 4] if manifest is None else resolution.DeclaredLayerIds(manifest.layer_ids,
                                                                                 str(manifest.path), "layer_ids")
            try:
                target.ranks_agree(ids)  # the plugin's own check, over SGLang's TP CPU group
                outcome = ("passed",)
            except DeploymentError as e:
                outcome = ("refused", e.file, e.field, e.problem)
            said.put((case, rank, outcome))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        said.put((None, rank, ("crashed", repr(e))))


def run_ranks(draft_dir, cases: list, prepare, edit) -> dict:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    go, said = [ctx.Queue(), ctx.Queue()], ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, str(draft_dir), cases, go, said)) for r in range(2)]
    # the children's start-up hook (cpu_runtime's sitecustomize) imports the package before spawn sets sys.path:
    # this checkout first on PYTHONPATH, as for every SGLang subprocess of the tests
    inherited = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = subprocess_env()["PYTHONPATH"]
    try:
        for p in procs:
            p.start()
    finally:
        if inherited is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = inherited
    out = {}
    try:
        for case in cases:
            outcome = [None, None]
            prepare(case)
            for rank in (0, 1):
                go[rank].put(case)
                got = said.get(timeout=TIMEOUT)
                assert got == (case, rank, "read"), got
                if rank == 0:
                    edit(case)
            for _ in range(2):
                c, rank, result = said.get(timeout=TIMEOUT)
                assert c == case, (c, rank, result)
                outcome[rank] = result
            out[case] = outcome
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    return out
