#!/usr/bin/env python3
"""Probe a release's seams in its wheel's source, without installing it: the proof behind "seam probe only".

For every seam of a release file (resolution and draft side), every family's seams, and the startup guard's
``ModelRunner.initialize``, the module's source is read from the SGLang wheel (``pip download --no-deps``,
cached under ``~/.cache/sglang-eagle3-capture/wheels``), its ``ast`` is searched for the owner class and the
attribute, following base classes through ``from ... import`` into other modules of the wheel, and the
function's parameter names are compared with the seam's. New attributes (seams with no parameters) must be
absent. Nothing is imported or executed from the wheel.

    python3 tools/static_seams.py 0.5.18 0.5.19      # one line per seam; exit 1 when one does not match
    python3 tools/static_seams.py --vllm 0.33.0 0.34.0  # the vLLM plugin's seams in vLLM's wheels
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sglang_eagle3_capture.core import families, releases  # noqa: E402
from sglang_eagle3_capture.core.releases.schema import Seam  # noqa: E402
from sglang_eagle3_capture.core.sglang import guard  # noqa: E402
from sglang_eagle3_capture.doctor import release_table  # noqa: E402

ABSENT = "absent.family"  # the hook of a family the release lacks (absent_families)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sglang-eagle3-capture" / "wheels"


def wheel(version: str, dist: str = "sglang") -> Path:
    """The ``dist`` wheel (SGLang, or vLLM) of ``version`` (downloaded once)."""
    found = sorted(CACHE.glob(f"{dist}-{version}-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        f"{dist}=={version}", "-d", str(CACHE)], check=True)
        found = sorted(CACHE.glob(f"{dist}-{version}-*.whl"))
    return found[0]


class Source:
    """The Python modules of one wheel, parsed on demand."""

    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())

    @lru_cache(maxsize=None)
    def module(self, name: str) -> ast.Module | None:
        for candidate in (name.replace(".", "/") + ".py", name.replace(".", "/") + "/__init__.py"):
            if candidate in self.names:
                return ast.parse(self.zip.read(candidate).decode("utf-8"))
        return None

    def find(self, module: str, owner: str, attr: str, depth: int = 0):
        """``(FunctionDef or other node, where)`` of ``owner.attr`` in ``module``, through base classes; None."""
        tree = self.module(module)
        if tree is None or depth > 8:
            return None
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner), None)
        if cls is None:  # re-exported: follow ``from X import owner``
            origin = _imported_from(tree, owner, module)
            return self.find(origin, owner, attr, depth + 1) if origin else None
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
                return node, f"{module}.{owner}"
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and attr in _targets(node):
                return node, f"{module}.{owner}"
        for base in cls.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name is None or name in ("object", "Module"):
                continue
            same = any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body)
            origin = module if same else _imported_from(tree, name, module)
            hit = self.find(origin, name, attr, depth + 1) if origin else None
            if hit is not None:
                return hit
        return None


def _targets(node) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _imported_from(tree: ast.Module, name: str, module: str) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            if node.level:  # relative import
                base = module.split(".")[: -node.level]
                return ".".join(base + ([node.module] if node.module else []))
            return node.module
    return None


def _params(fn: ast.FunctionDef) -> tuple[str, ...]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    names += [a.vararg.arg] if a.vararg else []
    names += [p.arg for p in a.kwonlyargs]
    names += [a.kwarg.arg] if a.kwarg else []
    return tuple(names)


def check(source: Source, seam: Seam) -> str | None:
    """None when ``seam`` matches the wheel's source, else what differs.

    An absent family's hook (role ``absent.family``) counts only where its own model file defines it: one its class
    inherits from another model file's class is that file's family's (Qwen3.5-VL inherits Qwen3-VL's before 0.5.22,
    which never marks the Qwen3.5 stack's layers). An absent hook of a present family (``absent_hooks``) must be
    missing through every base class."""
    hit = source.find(seam.module, seam.owner, seam.attr) if seam.owner else None
    if seam.role == ABSENT and hit is not None and not hit[1].startswith(f"{seam.module}."):
        hit = None
    if seam.params is None:
        return None if hit is None else f"{seam.name} already exists ({hit[1]})"
    if hit is None:
        return f"{seam.name} not found"
    node, where = hit
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{seam.name} is not a function ({where})"
    params = _params(node)
    return None if params == seam.params else f"{seam.name} has parameters {params} ({where}), expected {seam.params}"


def seams_of(release: releases.Release) -> list[Seam]:
    """Every seam the plugin relies on in ``release``: its own, every family's it has, and the startup guard's; for a
    family the release lacks (``absent_families``), each causal LM's hook as an attribute that must not exist, and so
    for a causal LM whose hook it lacks (``absent_hooks``)."""
    out = list(release.seams)
    for family in families.all_families():
        if family.name in release.absent_families:
            out += [Seam(ABSENT, m, cls, "set_eagle3_layers_to_capture", None)
                    for m, cls in family.causal_lms]
            continue
        out += list(family.seams(release.absent_hooks))
        out += [Seam("absent.set_eagle3", m, cls, "set_eagle3_layers_to_capture", None)
                for m, cls in family.causal_lms if cls in release.absent_hooks]
    out.append(Seam("guard", guard.MODULE, guard.OWNER, guard.ATTR, ("self",)))
    return out


def probe(version: str) -> list[tuple[Seam, str | None]]:
    """``(seam, problem or None)`` for every seam of ``version``."""
    source = Source(wheel(version))
    return [(seam, check(source, seam)) for seam in seams_of(release_table.get(version))]


def probe_vllm(version: str) -> list[tuple[Seam, str | None]]:
    """``(seam, problem or None)`` for every seam of vLLM ``version``'s release file (the vLLM plugin's), in the vLLM
    wheel's source."""
    release = releases.vllm_get(version)
    source = Source(wheel(release.version, "vllm"))
    return [(seam, check(source, seam)) for seam in release.seams]


def main(argv: list[str]) -> int:
    bad = 0
    if argv[1:2] == ["--vllm"]:
        for version in argv[2:]:
            for seam, problem in probe_vllm(version):
                bad += problem is not None
                print(f"vllm {version}  {seam.role:14s} {seam.name:55s} {problem or 'ok'}")
        return 1 if bad else 0
    for version in argv[1:]:
        for seam, problem in probe(version):
            bad += problem is not None
            print(f"{version}  {seam.role:40s} {seam.name:55s} {problem or 'ok'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
