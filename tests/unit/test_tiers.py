"""The test tiers themselves (tests/conftest.py): unit/ never imports sglang nor uses the in-process runner nor the
network, the engine tier is exactly what ``-m engine`` selects, no test module imports another (helpers live in
support/), and what the benchmarks share with the tests lives in harness/, which imports nothing from tests/."""

import ast
import importlib.util
import socket
import subprocess
import sys
import tomllib
from fnmatch import fnmatch
from pathlib import Path
from types import SimpleNamespace

import pytest

from support import REPO, TESTS_DIR, subprocess_env

TIERS = ("unit", "inprocess", "engine")
# support modules that exist to run SGLang, in this process or in a subprocess
SGLANG_SUPPORT = ("harness.sglang_inprocess", "harness.servers", "support.engine_harness", "support.engine_worker",
                  "support.draft_dirs.load_draft", "support.servers", "support.ranks_side")


def _test_modules(tier: str) -> list[Path]:
    return sorted((TESTS_DIR / tier).glob("test_*.py"))


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def _imported(path: Path) -> list[str]:
    """Every module (and ``module.name`` for ``from module import name``) an import statement in ``path`` names,
    at the top level or inside a function."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return out


def _is_sglang(name: str) -> bool:
    return name == "sglang" or name.startswith("sglang.")


def test_every_test_module_is_in_a_tier():
    loose = [p.name for p in TESTS_DIR.glob("test_*.py")] + [p.name for p in (TESTS_DIR / "support").glob("test_*.py")]
    assert loose == [], "test modules go in tests/unit, tests/inprocess or tests/engine"
    folders = {p.name for p in TESTS_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {*TIERS, "support"}
    assert all(_test_modules(t) for t in TIERS)
    names = [p.name for t in TIERS for p in _test_modules(t)]
    assert len(names) == len(set(names)), "test module names must be unique across the tiers"


@pytest.mark.parametrize("path", _test_modules("unit"), ids=lambda p: p.name)
def test_unit_module_never_imports_sglang(path):
    bad = [n for n in _imported(path) if _is_sglang(n) or n in SGLANG_SUPPORT]
    assert bad == [], f"{path.name} imports {bad}: it belongs in tests/inprocess/ or tests/engine/"


@pytest.mark.parametrize("path", _test_modules("unit"), ids=lambda p: p.name)
def test_unit_module_never_uses_the_runner(path):
    tree = ast.parse(path.read_text(), str(path))
    users = [f.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             and "runner" in [a.arg for a in (*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs)]]
    asked = [c.func.attr for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and c.func.attr in ("getfixturevalue", "usefixtures")
             and any(isinstance(a, ast.Constant) and a.value == "runner" for a in c.args)]
    assert users == [] and asked == [], f"{path.name}: {users or asked} use the in-process SGLang runner"


def test_no_test_module_imports_another():
    test_names = {p.stem for p in TESTS_DIR.rglob("test_*.py")} | {"conftest"}
    found = {}
    for path in _python_files():
        bad = [n for n in _imported(path) if set(n.lstrip(".").split(".")) & test_names]
        if bad:
            found[str(path.relative_to(TESTS_DIR))] = bad
    assert found == {}, "shared helpers go in tests/support/"


def test_importing_every_unit_module_leaves_sglang_unimported():
    """A fresh interpreter (``fixtures`` and ``support`` importable, as pytest's ``pythonpath`` makes them) runs
    tests/conftest.py, then imports every unit test module. When this session collected exactly the unit tier
    (``pytest tests/unit``, make quick), this process is that interpreter already: pytest imported conftest.py and
    every unit module before the first test ran, so sglang must be absent here (a unit test that imports it fails
    on its own, tests/unit/conftest.py)."""
    imported = _imported_test_modules()
    if imported >= {p.resolve() for p in _test_modules("unit")} and all(TESTS_DIR / "unit" in p.parents
                                                                       for p in imported):
        assert sorted(m for m in sys.modules if _is_sglang(m)) == []
        return
    code = "\n".join([
        "import importlib.util, sys",
        "for path in sys.argv[1:]:",
        "    spec = importlib.util.spec_from_file_location('unit_' + path.rsplit('/', 1)[-1][:-3], path)",
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))",
        "print(sorted(m for m in sys.modules if m == 'sglang' or m.startswith('sglang.')))",
    ])
    paths = [str(p) for p in _test_modules("unit")]
    proc = subprocess.run([sys.executable, "-c", code, str(TESTS_DIR / "conftest.py"), *paths], env=subprocess_env(),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def _imported_test_modules() -> set[Path]:
    """The test modules this process has imported (pytest imports each collected module, deselected or not)."""
    files = (getattr(m, "__file__", None) for m in list(sys.modules.values()))
    return {Path(f).resolve() for f in files if f and Path(f).name.startswith("test_")
            and TESTS_DIR in Path(f).resolve().parents}


def test_the_engine_marker_selects_exactly_the_engine_tier():
    """tests/engine/conftest.py marks every item collected from tests/engine (and only those) ``engine``, and no
    module elsewhere marks itself ``engine`` (checked without collecting the suite, which imports SGLang)."""
    spec = importlib.util.spec_from_file_location("engine_conftest", TESTS_DIR / "engine" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    items = [SimpleNamespace(path=TESTS_DIR / tier / "test_x.py", marks=[]) for tier in TIERS]
    for item in items:
        item.add_marker = item.marks.append
    conftest.pytest_collection_modifyitems(items)
    assert conftest.pytest_collection_modifyitems.pytest_impl["tryfirst"]  # marks before -m deselects
    assert [[m.name for m in item.marks] for item in items] == [[], [], ["engine"]]
    elsewhere = [p.name for t in TIERS if t != "engine" for p in _test_modules(t) if _marks_engine(p)]
    assert elsewhere == []


def _marks_engine(path: Path) -> bool:
    """``path`` names ``<...>.mark.engine`` in code (a decorator or ``pytestmark``)."""
    return any(isinstance(n, ast.Attribute) and n.attr == "engine" and isinstance(n.value, ast.Attribute)
               and n.value.attr == "mark" for n in ast.walk(ast.parse(path.read_text(), str(path))))


def _outside_tests() -> list[Path]:
    return sorted(p for d in ("harness", "benchmarks") for p in (REPO / d).rglob("*.py")
                  if "__pycache__" not in p.parts)


def test_harness_and_benchmarks_import_nothing_from_tests():
    """No ``support`` (or ``tests``) import and no ``tests/`` put on sys.path in harness/ or benchmarks/."""
    found = {}
    for path in _outside_tests():
        text = path.read_text()
        bad = [n for n in _imported(path) if n.split(".")[0] in ("support", "tests")]
        bad += [line.strip() for line in text.splitlines() if "sys.path" in line and "tests" in line]
        if bad:
            found[str(path.relative_to(REPO))] = bad
    assert _outside_tests() and found == {}


def test_harness_is_never_shipped():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not any(fnmatch(name, pattern) for pattern in include for name in ("harness", "harness.servers"))


def test_the_unit_tier_refuses_the_network():
    """tests/unit/conftest.py: a unit test not marked ``network`` that reaches another host fails at once."""
    with pytest.raises(OSError, match="mark it network"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)  # TEST-NET-1: never routed
