"""The package's layout promises (docs/development.md): three parts with one direction of imports (``core`` <-
``observe`` <- ``doctor``; the doctor never reaches into an engine adapter), no import cycles, function-local imports
only for torch, safetensors, SGLang, a few heavy or optional libraries and observability switched on inside the SGLang
adapter, and no SGLang release named outside the tables."""

import ast
import json
import os
import re
import subprocess
import sys

from support import REPO

PACKAGE = REPO / "sglang_eagle3_capture"
NAME = "sglang_eagle3_capture"
# prometheus_client: its value class follows PROMETHEUS_MULTIPROC_DIR at import, which SGLang sets at startup
LAZY_OK = ("torch", "safetensors", "sglang", "vllm", "tqdm", "setproctitle", "matplotlib", "prometheus_client",
           "pyarrow")
LAZY_PACKAGE_OK = {f"{NAME}.doctor.model", f"{NAME}.doctor.rollout"}  # import torch at module level
# observability, imported by the SGLang adapter only where it is switched on (and the adapter's runtime state, read by
# the settings report only inside SGLang, so the doctor importing the report never loads the adapter)
LAZY_OBSERVE = {f"{NAME}.core.sglang.plugin": {f"{NAME}.observe.metrics"},
                f"{NAME}.core.vllm.plugin": {f"{NAME}.observe.acceptance"},
                f"{NAME}.core.sglang.target": {f"{NAME}.observe.dump", f"{NAME}.observe.sglang_report"},
                f"{NAME}.observe.sglang_report": {f"{NAME}.core.sglang.runtime"}}
ADAPTERS = (f"{NAME}.core.sglang", f"{NAME}.core.vllm")  # engine adapters: the doctor never imports them
VERSION = re.compile(r"\b0\.5\.\d+")  # an SGLang release


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("")
        parts = list(rel.parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        yield ".".join(parts), is_pkg, ast.parse(path.read_text())


def _targets(module: str, is_pkg: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The package modules an import statement names (a ``from X import y`` names X.y when y is a submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith(NAME)]
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    if not origin.startswith(NAME):
        return []
    out = []
    for a in node.names:
        sub = f"{origin}.{a.name}"
        exists = (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists() or \
            (PACKAGE.parent / sub.replace(".", "/") / "__init__.py").exists()
        out.append(sub if exists else origin)
    return out


def _graph(local: bool = True):
    """Module -> the package modules it imports (``local``: function-local imports included)."""
    graph = {}
    for module, is_pkg, tree in _modules():
        edges = set()
        nodes = ast.walk(tree) if local else [n for n in _top_level(tree)]
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(t for t in _targets(module, is_pkg, node) if t != module)
        graph[module] = edges
    return graph


def _top_level(tree):
    """Import statements run at module import time (not inside a function)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def _is(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_imports_point_one_way_core_observe_doctor():
    """core imports core only (observe only function-locally where an engine adapter switches it on), and neither engine
    adapter imports the other; observe
    imports core and observe; the doctor imports core and observe but never an engine adapter (core/sglang/), not
    even through an observe module it imports. The package's own ``__init__`` (``__version__``) is everyone's."""
    offenders = []
    every, eager = _graph(), _graph(local=False)
    for module, targets in every.items():
        part = _part(module)
        for t in sorted(targets):
            lazy = t not in eager[module]
            own = next((a for a in ADAPTERS if _is(module, a)), None)
            if own is not None and any(_is(t, a) for a in ADAPTERS if a != own):
                ok = False  # an engine adapter never imports the other's: what they share lives in core/
            elif part == "core":
                ok = _part(t) in ("", "core") or (lazy and t in LAZY_OBSERVE.get(module, ()))
            elif part == "observe":
                ok = _part(t) in ("", "core", "observe")
            elif part == "doctor":
                ok = _part(t) in ("", "core", "observe", "doctor") and not any(_is(t, a) for a in ADAPTERS)
            else:  # the package's __init__ / __main__
                ok = True
            if not ok:
                offenders.append(f"{module} -> {t}{' (function-local)' if lazy else ''}")
    for module in (m for m in eager if _part(m) == "doctor"):  # what importing a doctor module loads
        seen, todo = set(), [module]
        while todo:
            for t in eager.get(todo.pop(), ()):
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        offenders += [f"{module} loads {t}" for t in sorted(seen) if any(_is(t, a) for a in ADAPTERS)]
    assert offenders == []


def test_the_entry_point_loads_neither_observe_nor_doctor():
    """What SGLang's processes import (the entry point, in a fresh interpreter with SGLang and torch blocked):
    core only; observability and the doctor stay out until switched on or run."""
    code = ("import sys, json\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('sglang', 'torch'):\n"
            "            raise ImportError(name)\n"
            "sys.meta_path.insert(0, Block())\n"
            f"import {NAME}.core.sglang.plugin\n"
            f"print(json.dumps(sorted(m for m in sys.modules if m.startswith('{NAME}.'))))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no test-site sitecustomize
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert f"{NAME}.core.sglang.plugin" in loaded
    assert [m for m in loaded if _part(m) not in ("core",)] == []
    # the capture, the draft loader, the self-check, the family tables and the user-file readers wait for the trigger
    # (a process that builds a ModelRunner): the launcher, the detokenizer and the DP controller never load them
    at_trigger = {f"{NAME}.core.{m}" for m in ("sglang.target", "sglang.draft", "sglang.selfcheck", "families",
                                               "capture", "manifest", "userfiles", "policy", "records")}
    assert sorted(at_trigger & set(loaded)) == []


def test_no_import_cycles_function_local_imports_included():
    graph = _graph()
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n, stack + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_function_local_imports_only_where_they_buy_something():
    offenders = []
    for module, is_pkg, tree in _modules():
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in (n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else _targets(module, is_pkg, node) or [node.module or ""])
                for name in names:
                    if not name.startswith(LAZY_OK) and name not in LAZY_PACKAGE_OK | LAZY_OBSERVE.get(module, set()):
                        offenders.append(f"{module}:{node.lineno}: {name}")
    assert offenders == []


def _docstrings(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                yield first.value


def test_no_release_is_named_in_code_outside_the_tables():
    offenders = []
    for module, _, tree in _modules():
        if module.startswith((f"{NAME}.core.releases", f"{NAME}.core.families", f"{NAME}.doctor.release_table")):
            continue
        docs = {id(c) for c in _docstrings(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and VERSION.search(node.value):
                offenders.append(f"{module}:{node.lineno}: {node.value[:60]!r}")
    assert offenders == []
