"""The package's layout promises (docs/development.md): no import cycles, function-local imports only for torch,
safetensors, SGLang and a few heavy or optional libraries, and no SGLang release named outside the tables."""

import ast
import re

from support import REPO

PACKAGE = REPO / "sglang_eagle3_capture"
NAME = "sglang_eagle3_capture"
# prometheus_client: its value class follows PROMETHEUS_MULTIPROC_DIR at import, which SGLang sets at startup
LAZY_OK = ("torch", "safetensors", "sglang", "vllm", "tqdm", "setproctitle", "matplotlib", "prometheus_client",
           "pyarrow")
LAZY_PACKAGE_OK = {f"{NAME}.draft.model", f"{NAME}.draft.rollout"}  # import torch at module level
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


def _graph():
    graph = {}
    for module, is_pkg, tree in _modules():
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(t for t in _targets(module, is_pkg, node) if t != module)
        graph[module] = edges
    return graph


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
                    if not name.startswith(LAZY_OK) and name not in LAZY_PACKAGE_OK:
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
        if module.startswith((f"{NAME}.releases", f"{NAME}.families")):
            continue
        docs = {id(c) for c in _docstrings(tree)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and VERSION.search(node.value):
                offenders.append(f"{module}:{node.lineno}: {node.value[:60]!r}")
    assert offenders == []
