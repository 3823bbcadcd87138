"""core/sglang/: version facts stay in the tables (no SGLang release named in its code, docstrings included), and the
package docstring names every serving module that imports SGLang."""

import ast
import re

from support import REPO

CORE = REPO / "sglang_eagle3_capture" / "core"
SERVING = CORE / "sglang"
# the engine-neutral serving code beside the adapter: the patch engine, the import trigger, the capture
NEUTRAL = [CORE / "seams.py", CORE / "after_import.py", CORE / "capture.py"]
VERSION = re.compile(r"\b0\.\d+\.\d+")  # an SGLang release


def test_no_release_is_named_in_serving_docstrings_or_comments():
    offenders = [f"{p.name}:{n}: {line.strip()[:80]}" for p in [*sorted(SERVING.glob("*.py")), *NEUTRAL]
                 for n, line in enumerate(p.read_text().splitlines(), 1) if VERSION.search(line)]
    assert offenders == []  # say "the release whose table sets X", or "see core/releases/"


def _imports_sglang(path):
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
        if any(n == "sglang" or n.startswith("sglang.") for n in names):
            return True
    return False


def test_the_package_docstring_lists_every_module_that_imports_sglang():
    doc = " ".join(ast.get_docstring(ast.parse((SERVING / "__init__.py").read_text())).split())
    sentence = doc[doc.index("Only "):].split(" import SGLang")[0]
    importers = {p.stem for p in SERVING.glob("*.py") if _imports_sglang(p)}
    assert importers and importers == set(re.findall(r"``(\w+)``", sentence))
