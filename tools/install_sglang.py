#!/usr/bin/env python3
"""Install one SGLang release, and this package with its test extra, into a virtual environment.

Why not a plain ``pip install sglang==X``: SGLang 0.5.18 ... 0.5.22 declare ``cuda-tile==1.6.0rc5``, which the
package registry serves only as a stub sdist that downloads the real wheel from pypi.nvidia.com while it prepares
its metadata; where that host is unreachable the whole install fails. No SGLang module imports ``cuda.tile``, and
flashinfer pulls a real ``cuda-tile>=1.4.0`` wheel anyway. So:

1. the environment's pip installs uv (:data:`UV`), which does the rest: about 45 s cold against pip's 175 s for
   0.5.23 (resolution and unpacking; docs/development.md), with pip's own configuration (indexes, local wheel
   folders, constraints) passed on and each install compiled to bytecode (:func:`uv_install`);
2. ``uv pip install --no-deps sglang==VERSION`` (the SGLang wheel alone);
3. read its ``Requires-Dist`` in the environment's own interpreter (``importlib.metadata.requires``), drop
   optional-extra lines and the release table's ``install_excludes`` for that release
   (``sglang_eagle3_capture/core/releases``), keep environment markers;
4. install those requirements, this project's own dependencies (``pyproject.toml``, SGLang left out: it is
   installed) and those of its ``--extra`` groups, in one run under ``tools/constraints.txt``, so every pin SGLang
   declares holds (a requirement on ``sglang`` itself would resolve SGLang's pins again, the excluded one included);
5. ``uv pip install --no-deps -e .`` (this checkout, editable).

``pip check`` then reports the dropped pin (``sglang X has requirement cuda-tile==1.6.0rc5, but you have
cuda-tile 1.7.0``), which is expected. Standard library only.

Usage::

    python3 tools/install_sglang.py VENV VERSION [--extra GROUP ...] [--dry-run]
    python3 tools/install_sglang.py ~/.cache/sglang-eagle3-capture/env-0.5.21 0.5.21 --extra test
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "tools" / "constraints.txt"
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"\bextra\s*==")


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(req: str) -> str:
    """The project name a requirement line names."""
    m = _NAME.match(req)
    if m is None:
        raise ValueError(f"cannot parse the project name of requirement {req!r}")
    return canonical(m.group(1))


def release_excludes(version: str) -> tuple[str, ...]:
    """The pins the release table says to leave out for ``version`` (none for a release it does not list)."""
    sys.path.insert(0, str(ROOT))
    from sglang_eagle3_capture.doctor import release_table  # the tables import only the standard library

    try:
        return release_table.get(version).install_excludes
    except KeyError:
        return ()


def project_requirements(extras: list[str]) -> list[str]:
    """This project's dependencies and those of ``extras``, from pyproject.toml, without SGLang."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project.get("dependencies", []))
    for extra in extras:
        reqs += project.get("optional-dependencies", {})[extra]
    return [r for r in reqs if requirement_name(r) != "sglang"]


def split_requirements(requires: list[str], exclude: set[str]) -> tuple[list[str], list[str]]:
    """(kept, dropped): dropped are optional-extra requirements and excluded project names."""
    kept, dropped = [], []
    for req in requires:
        marker = req.split(";", 1)[1] if ";" in req else ""
        (dropped if _EXTRA_MARKER.search(marker) or requirement_name(req) in exclude else kept).append(req)
    return kept, dropped


# uv installs what pip would, in a fraction of the time (measured cold here: about 45 s against pip's 175 s for
# 0.5.23's 226 packages, mostly resolution and serial unpacking); it is installed into the environment by its pip.
UV = "uv==0.13.9"
# pip configuration keys that decide where packages come from and what caps apply, as uv's options
_PIP_TO_UV = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
              "constraint": "--constraint"}


def pip_settings(py: Path, dry_run: bool) -> list[str]:
    """pip's own configuration (``pip config list``: its files and ``PIP_*`` variables) as uv options: uv reads
    neither, and the indexes, local wheel folders and caps a machine configures for pip must apply alike. With
    ``--index-strategy unsafe-best-match`` uv chooses across every index as pip does, preferring the extra ones for
    the same version (a local wheel over a download)."""
    if dry_run and not py.exists():
        return []
    listed = subprocess.run([str(py), "-m", "pip", "config", "list"], capture_output=True, text=True, check=True)
    pairs: dict[tuple[str, str], None] = {}  # ordered, each once (a file and a variable may say the same)
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        flag = _PIP_TO_UV.get(key.rsplit(".", 1)[-1])
        if flag is not None:
            pairs.update({(flag, item): None for item in value.strip().strip("'\"").split()})
    return [part for pair in pairs for part in pair]


def uv_install(venv: Path, dry_run: bool) -> list[str]:
    """The ``uv pip install`` command every install into ``venv`` starts with (tools/install_vllm.py's too): no cache,
    uv choosing across every index as pip does, pip's own settings (:func:`pip_settings`), and bytecode compiled for
    what it installs. These machines set PYTHONDONTWRITEBYTECODE=1 and uv writes no .pyc files by default, so without
    ``--compile-bytecode`` every SGLang or vLLM process compiles what it imports from source (docs/development.md)."""
    py = venv / "bin" / "python"
    return [str(venv / "bin" / "uv"), "pip", "install", "--python", str(py), "--no-cache", "--compile-bytecode",
            "--index-strategy", "unsafe-best-match", *pip_settings(py, dry_run)]


def _run(cmd: list[str], dry_run: bool, capture: bool = False) -> str:
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    if dry_run and not capture:
        return ""
    start = time.monotonic()
    out = subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE if capture else None)
    print(f"  ({time.monotonic() - start:.0f} s)", flush=True)
    return out.stdout if capture else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("venv", type=Path)
    ap.add_argument("version", help="SGLang release, e.g. 0.5.21")
    ap.add_argument("--extra", action="append", default=[], metavar="GROUP",
                    help="also install this project's optional-dependency group (repeatable), e.g. test")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and install nothing")
    args = ap.parse_args(argv)

    dry_run = args.dry_run
    exclude = {canonical(n) for n in release_excludes(args.version)}
    py = args.venv / "bin" / "python"
    start = time.monotonic()
    if not py.exists():
        _run([sys.executable, "-m", "venv", str(args.venv)], dry_run)
    _run([str(py), "-m", "pip", "install", "--no-cache-dir", "-q", UV], dry_run)
    pip = [*uv_install(args.venv, dry_run), "-c", str(CONSTRAINTS)]
    _run([*pip, "--no-deps", f"sglang=={args.version}"], dry_run)
    if dry_run and not py.exists():
        print("(dry run: the environment does not exist, so SGLang's requirements cannot be read)")
        return 0
    probe = ("import importlib.metadata as m, json; "
             "print(json.dumps([m.version('sglang'), m.requires('sglang') or []]))")
    installed, requires = json.loads(_run([str(py), "-c", probe], dry_run, capture=True))
    if not dry_run and installed != args.version:
        raise SystemExit(f"expected sglang {args.version} in {args.venv}, found {installed}")
    kept, dropped = split_requirements(requires, exclude)
    for req in dropped:
        if requirement_name(req) in exclude:
            print(f"  left out (release table install_excludes): {req}")
    _run([*pip, *kept, *project_requirements(args.extra)], dry_run)
    _run([*pip, "--no-deps", "-e", str(ROOT)], dry_run)  # isolated build: the venv's bundled setuptools is too old
    if not dry_run:
        check = subprocess.run([str(py), "-m", "pip", "check"], text=True, capture_output=True)
        print("pip check:\n" + (check.stdout.strip() or "(nothing)"))
    print(f"sglang {args.version} environment ready in {args.venv} ({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
