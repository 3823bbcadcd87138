"""What the plugin's entry point costs every SGLang process: the package lines it imports and the milliseconds.

- ``entry``: importing ``sglang_eagle3_capture.core.sglang.plugin`` (what ``load_plugins`` does in the launcher, every
  scheduler, the DP controller and the detokenizer) in a fresh interpreter with SGLang and torch blocked (a
  meta-path finder that refuses them: the import must not need them); the package modules it loaded and their lines
  (``wc -l``), and the docstring lines among them;
- ``scheduler``: those, plus what a scheduler process imports on top when it runs a model with EAGLE-3: the metrics
  patch (at the scheduler module's import), the settings report (at the resolution seam), the dump module (at
  configure). Nothing else of the package is imported in SGLang's processes;
- ``importtime``: ``python -X importtime -c "import json; import <entry>"``, best of ``--runs`` runs: the entry's
  cumulative microseconds (the package's top-level entries, every module they import nested inside) next to
  ``import json`` in the same run as the yardstick;
- ``package``: ``wc -l`` of the whole package, by part (core, core/sglang, observe, doctor).

``--tree DIR`` measures another checkout (e.g. main before this change, ``git archive``d into DIR).

    python benchmarks/bench_import.py --label after             # appends to benchmarks/results/import.json
    python benchmarks/bench_import.py --tree /tmp/before --label before
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "sglang_eagle3_capture.core.sglang.plugin"
# What sglang.srt.plugins (which holds load_plugins) has imported before any plugin loads, of what the package uses.
PRELOAD = "packaging.version"
SCHEDULER_EXTRA = ("sglang_eagle3_capture.observe.metrics", "sglang_eagle3_capture.observe.sglang_report",
                   "sglang_eagle3_capture.observe.dump")

_LOADED = r"""
import ast, importlib, json, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("sglang", "torch"):
            raise ImportError("blocked " + name)
sys.meta_path.insert(0, Block())
out = {}
for step, mods in (("entry", [%r]), ("scheduler", %r)):
    for m in mods:
        try:
            importlib.import_module(m)
        except ImportError as e:  # a tree without this module
            print("skipped", m, e, file=sys.stderr)
    files = sorted({m.__file__ for n, m in sys.modules.items() if n.startswith("sglang_eagle3_capture")
                    and getattr(m, "__file__", None)})
    lines = doc = 0
    for f in files:
        src = open(f).read()
        lines += len(src.splitlines())
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                    ast.get_docstring(node, clean=False) is not None:
                doc += node.body[0].end_lineno - node.body[0].lineno + 1
    out[step] = {"modules": len(files), "lines": lines, "docstring_lines": doc,
                 "files": [f.split("sglang_eagle3_capture/", 1)[1] for f in files]}
print(json.dumps(out))
"""


def _env(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def loaded(tree: Path) -> dict:
    code = _LOADED % (ENTRY, list(SCHEDULER_EXTRA))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env(tree),
                         cwd="/")
    return json.loads(out.stdout)


def importtime(tree: Path, runs: int, preload: str = "") -> dict:
    """Best-of-``runs`` cumulative import time (microseconds) of ``json`` and of the entry point, same interpreter;
    ``preload``: modules imported first (what SGLang's processes have imported before ``load_plugins``)."""
    best = {"json_us": None, "entry_us": None}
    for _ in range(runs):
        code = f"import json; {'import ' + preload + '; ' if preload else ''}import {ENTRY}"
        out = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                             capture_output=True, text=True, check=True, env=_env(tree), cwd="/")
        top = [(int(cum), name.strip()) for _, cum, name in re.findall(r"import time:\s*(\d+) \|\s*(\d+) \|( *\S+)",
                                                                          out.stderr) if not name.startswith("  ")]
        json_us = sum(c for c, n in top if n == "json")
        entry_us = sum(c for c, n in top if n.startswith("sglang_eagle3_capture"))
        for key, value in (("json_us", json_us), ("entry_us", entry_us)):
            best[key] = value if best[key] is None else min(best[key], value)
    best["runs"], best["preload"], best["ratio"] = runs, preload or None, round(best["entry_us"] / best["json_us"], 1)
    best["lines"] = [line for line in out.stderr.splitlines() if re.search(r"\| +(json|sglang_eagle3_capture)", line)
                     and not re.search(r"\|   ", line)]  # the top-level entries of the last run, as printed
    return best


def package(tree: Path) -> dict:
    parts = {"core (less core/sglang)": 0, "core/sglang": 0, "observe": 0, "doctor": 0, "top level": 0}
    for f in (tree / "sglang_eagle3_capture").rglob("*.py"):
        rel = f.relative_to(tree / "sglang_eagle3_capture").as_posix()
        n = len(f.read_text().splitlines())
        part = ("core/sglang" if rel.startswith("core/sglang/") else "core (less core/sglang)"
                if rel.startswith("core/") else rel.split("/")[0] if "/" in rel else "top level")
        parts[part] = parts.get(part, 0) + n
    return {"total": sum(parts.values()), **parts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    ap.add_argument("--label", required=True, help="what the tree is, e.g. before / after")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "import.json")
    a = ap.parse_args()
    rev = subprocess.run(["git", "-C", str(a.tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or None
    row = {"bench": "import", "label": a.label, "commit": rev, "date": date.today().isoformat(),
           "python": sys.version.split()[0], **loaded(a.tree), "importtime": importtime(a.tree, a.runs),
           "importtime_in_sglang": importtime(a.tree, a.runs, PRELOAD), "package": package(a.tree)}
    rows = json.loads(a.out.read_text()) if a.out.exists() else []
    rows = [r for r in rows if r.get("label") != a.label] + [row]
    a.out.write_text(json.dumps(rows, indent=2) + "\n")
    e, s, t, g = row["entry"], row["scheduler"], row["importtime"], row["importtime_in_sglang"]
    print(f"{a.label}: entry {e['modules']} modules {e['lines']} lines ({e['docstring_lines']} docstring lines); "
          f"scheduler {s['modules']} modules {s['lines']} lines; import {t['entry_us'] / 1000:.1f} ms against "
          f"json {t['json_us'] / 1000:.1f} ms (x{t['ratio']}, best of {t['runs']}), with {PRELOAD} imported first "
          f"{g['entry_us'] / 1000:.1f} ms (x{g['ratio']}); package {row['package']}")


if __name__ == "__main__":
    main()
