"""One interpreter per test worker that imports torch and SGLang once and forks a child for each SGLang-side body.

SGLang allows one in-process ModelRunner per process (harness/sglang_inprocess.py), so every test that builds one
(a family's proof, a fixture served in process, a draft loaded by SGLang's own loader) needs a process of its own;
what each would pay again is importing torch, SGLang and the model modules, most of its time on this CPU. This
parent imports them once, before any torch operation has started a thread pool (a fork copies no threads), and forks
a child per call. The session fixture ``forked`` (tests/conftest.py) starts it on first use:
``forked.call("support.sglang_side:prefill_to_file", target, prompts, out)`` runs that function in a fresh child and
returns ``(exit status, the child's output)``. One request per stdin line, ``{"call", "args", "log"}``; one answer
per stdout line, ``{"rc"}``; the child's file descriptors 1 and 2 point at ``log``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path


def _preload() -> None:
    import harness

    harness.use_cpu_runtime()
    import sglang.srt.models.llama_eagle3  # noqa: F401  (the draft class)
    import torch  # noqa: F401

    import harness.sglang_inprocess  # noqa: F401  (SGLang's ModelRunner and what it imports)
    from sglang_eagle3_capture.core import families
    from sglang_eagle3_capture.core.sglang import selfcheck, target  # noqa: F401

    for family in families.all_families():  # every family's model module, so no child imports one again
        for module, _ in family.causal_lms:
            try:
                importlib.import_module(module)
            except ImportError:
                pass  # a release without that model file: the child that needs it fails with the reason


def _child(request: dict) -> None:
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    code = 1
    try:
        module, _, name = request["call"].partition(":")
        getattr(importlib.import_module(module), name)(*request["args"])
        code = 0
    except BaseException:  # noqa: BLE001 - reported through the exit status and the log
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    answers = os.fdopen(os.dup(1), "w", buffering=1)  # the answers' own pipe; whatever else prints goes to stderr
    os.dup2(2, 1)
    _preload()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")


class ForkServer:
    """The parent above as a subprocess of the test worker, started on the first :meth:`call`."""

    def __init__(self) -> None:
        self.proc = None
        self.logs = Path(tempfile.mkdtemp(prefix="forked_"))
        self.count = 0

    def call(self, target: str, *args) -> tuple[int, str]:
        """Run ``module:function`` with ``args`` (JSON values; paths as strings) in a forked child."""
        if self.proc is None:
            from support import REPO, subprocess_env

            self.server_log = open(self.logs / "server.log", "w")
            self.proc = subprocess.Popen([sys.executable, __file__], env=subprocess_env(), cwd=REPO,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.server_log,
                                         text=True)
        self.count += 1
        log = self.logs / f"call-{self.count}.log"
        request = {"call": target, "args": [str(a) if isinstance(a, Path) else a for a in args], "log": str(log)}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            tail = (self.logs / "server.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"the fork server exited with {self.proc.wait()} before answering {target}:\n{tail}")
        return json.loads(line)["rc"], log.read_text(errors="replace") if log.exists() else ""

    def close(self) -> None:
        if self.proc is not None:
            self.server_log.close()
            try:
                self.proc.stdin.close()
            except BrokenPipeError:  # the server already exited (its failure was reported to the call)
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for p in self.logs.glob("*"):
            p.unlink()
        self.logs.rmdir()


if __name__ == "__main__":
    serve()
