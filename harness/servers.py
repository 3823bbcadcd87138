"""``python -m sglang.launch_server`` on CPU in a subprocess, for the tests and benchmarks that need SGLang's startup
warmup request (``sglang.Engine`` sends none): start it, wait until it reports ready or exits, send requests, stop it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness import REPO

READY = "The server is fired up and ready to roll!"
# groups: the checked forward's ms, the check's own ms
PASSED_RE = (r"eagle3-capture self-check passed \(.*?; \d+ tokens, checked forward ([0-9.]+) ms, "
             r"the check's own work ([0-9.]+) ms\)")


def server_env(**extra: str) -> dict:
    """The CPU runtime's environment (cpu_runtime/ first on PYTHONPATH, then the repository) with the plugin loaded."""
    import sglang_cpu_patches

    env = sglang_cpu_patches.cpu_env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(REPO)])
    env["SGLANG_PLUGINS"] = "eagle3_capture"
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A CPU ``launch_server`` for ``model`` (EAGLE-3 with ``draft`` when given), output to ``log``.

    ``wait()`` returns True once the log says it is ready, False when the process exited first."""

    def __init__(self, model, log: Path, *, draft=None, env: dict, extra_args: list[str] = ()):
        self.port, self.log = _free_port(), Path(log)
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model), "--device", "cpu",
               "--attention-backend", "torch_native", "--disable-cuda-graph", "--skip-tokenizer-init",
               "--dtype", "float32", "--mem-fraction-static", "0.5", "--max-total-tokens", "2048",  # ENGINE_DEFAULTS
               "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "info", "--random-seed", "0"]
        if draft is not None:
            cmd += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(draft),
                    "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
                    "--speculative-num-draft-tokens", "2"]
        self.t0 = time.monotonic()
        self._out = open(self.log, "wb")
        self.proc = subprocess.Popen([*cmd, *extra_args], env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.ready_s: float | None = None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout: float = 600) -> bool:
        while time.monotonic() - self.t0 < timeout:
            if READY in self.text():
                self.ready_s = time.monotonic() - self.t0
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.5)
        raise TimeoutError(f"launch_server neither ready nor exited after {timeout} s:\n{self.text()[-3000:]}")

    def exit_code(self, timeout: float = 120) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def generate(self, input_ids: list[int], max_new_tokens: int = 4) -> dict:
        body = json.dumps({"input_ids": input_ids, "sampling_params": {"temperature": 0.0,
                                                                       "max_new_tokens": max_new_tokens}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/generate", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._out.close()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
