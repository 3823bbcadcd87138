#!/usr/bin/env python3
"""Prove the packaging promise on this machine: the wheel installs without SGLang and its doctor runs there, and
installing it beside an SGLang environment changes nothing of SGLang's (docs/development.md, "Packaging").

1. build the wheel (``pip wheel --no-deps``);
2. a fresh virtual environment with torch and no SGLang: ``pip install torch==2.13.0``, then the wheel (which brings
   safetensors, packaging, msgspec); SGLang must not be there; then ``inspect``, ``verify`` and ``convert`` on the
   bundled fixtures (fixtures/tiny, fixtures/tiny-llama), each must exit 0;
3. beside SGLang (``--beside PYTHON``, an SGLang environment's interpreter; nothing is installed there):
   ``pip install --dry-run --report`` of the wheel must install nothing but sglang-eagle3-capture and change no
   installed distribution; ``pip check`` shows the environment as it is.

Each command is printed with its exit status and the last lines of its output. Standard library only.

Usage::

    python3 tools/wheel_proof.py WORKDIR [--beside /work/main/.venv/bin/python] [--torch torch==2.13.0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list, *, cwd: Path = ROOT, tail: int = 6, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    print("$ " + " ".join(map(str, cmd)), flush=True)
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    lines = (out.stdout + out.stderr).strip().splitlines()
    for line in lines[-tail:] if tail else []:
        print("    " + line)
    print(f"    -> exit {out.returncode}", flush=True)
    if out.returncode not in ok:
        sys.exit(f"FAILED: {' '.join(map(str, cmd))}")
    return out


def build(work: Path) -> Path:
    # from a copy: setuptools writes build/ and *.egg-info beside the sources it builds
    src, dist = work / "src", work / "dist"
    shutil.copytree(ROOT, src, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "fixtures"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, src])
    (wheel,) = dist.glob("sglang_eagle3_capture-*.whl")
    return wheel


def fresh(work: Path, wheel: Path, torch: str) -> None:
    env = work / "venv"
    venv.create(env, with_pip=True, clear=True)
    py, cli = env / "bin" / "python", env / "bin" / "sglang-eagle3-capture"
    run([py, "-m", "pip", "install", "-q", torch])
    run([py, "-m", "pip", "install", "-q", wheel])
    run([py, "-m", "pip", "list", "--format=freeze"], tail=40)
    run([py, "-c", "import importlib.util as u; assert u.find_spec('sglang') is None; print('no sglang')"])
    run([py, "-m", "pip", "check"])
    fx, out = ROOT / "fixtures", work / "converted"
    run([cli, "inspect", fx / "tiny" / "draft", "--target", fx / "tiny" / "target"])
    run([cli, "inspect", fx / "tiny-llama" / "draft", "--target", fx / "tiny-llama" / "target", "--stock"],
        ok=(0, 1))  # --stock: stock SGLang mis-wires this draft (exit 1 is the finding, not a failure)
    run([cli, "verify", fx / "tiny" / "draft", "--data", fx / "tiny" / "samples", "--target", fx / "tiny" / "target",
         "--no-progress"], tail=4)
    run([cli, "convert", fx / "tiny-llama" / "speculators", out, "--target", fx / "tiny-llama" / "target"])
    run([cli, "inspect", out, "--target", fx / "tiny-llama" / "target"])


def beside(work: Path, wheel: Path, python: str) -> None:
    report = work / "beside-report.json"
    before = json.loads(run([python, "-m", "pip", "list", "--format=json"], tail=0).stdout)
    installed = {d["name"].lower().replace("_", "-"): d["version"] for d in before}
    print(f"    sglang {installed.get('sglang')} in {python}")
    run([python, "-m", "pip", "install", "--dry-run", "--report", report, "-q", wheel])
    picked = [(i["metadata"]["name"].lower().replace("_", "-"), i["metadata"]["version"])
              for i in json.loads(report.read_text())["install"]]
    print(f"    pip would install: {picked}")
    changed = [(n, installed[n], v) for n, v in picked if n in installed and n != "sglang-eagle3-capture"
               and installed[n] != v]
    new = [n for n, _ in picked if n not in installed]
    if any(n == "sglang" for n, _ in picked) or changed or new:
        sys.exit(f"FAILED: installing the wheel beside SGLang would change {changed} and add {new}")
    print("    nothing of SGLang's environment changes (only sglang-eagle3-capture itself)")
    run([python, "-m", "pip", "check"], ok=(0, 1), tail=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workdir", type=Path)
    p.add_argument("--beside", help="an SGLang environment's python (nothing is installed there)")
    p.add_argument("--torch", default="torch==2.13.0", help="the torch requirement of the fresh environment")
    a = p.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    wheel = build(a.workdir)
    fresh(a.workdir, wheel, a.torch)
    if a.beside:
        beside(a.workdir, wheel, a.beside)
    print("OK")


if __name__ == "__main__":
    main()
