#!/usr/bin/env python3
"""Print the README's support matrix from the release table (sglang_eagle3_capture/core/releases), or check it.

    python3 tools/support_matrix.py            # the Markdown block
    python3 tools/support_matrix.py --check    # exit 1 when README.md's block differs (tests/unit/test_docs.py)

README.md holds the block between ``<!-- support-matrix:begin -->`` and ``<!-- support-matrix:end -->``.
Standard library only (the tables import nothing else).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sglang_eagle3_capture.core import releases  # noqa: E402
from sglang_eagle3_capture.core.releases.schema import PROVEN_CPU_ENGINE  # noqa: E402
from sglang_eagle3_capture.doctor import release_table  # noqa: E402

BEGIN, END = "<!-- support-matrix:begin -->", "<!-- support-matrix:end -->"


def _status(r: releases.Release) -> str:
    if not r.supported:
        return f"refused at startup: {r.refused_because}"
    notes = []
    if r.install_excludes:
        notes.append(f"install with tools/install_sglang.py (pins {', '.join(r.install_excludes)})")
    if r.embedding_crashes:
        notes.append(f"layer id -1 refused on {', '.join(r.embedding_crashes)} (its loop crashes at the embedding)")
    return "supported" + (": " + "; ".join(notes) if notes else "")


def matrix() -> str:
    """The Markdown table, newest release first."""
    rows = ["| SGLang | built | status | proven here |", "|---|---|---|---|"]
    for r in reversed(release_table.all_releases()):
        proven = r.proven + (" (CI)" if r.proven == PROVEN_CPU_ENGINE else "")
        rows.append(f"| {r.version} | {r.built} | {_status(r)} | {proven} |")
    rows.append("| older than the table (0.5.9 and before) | | no `sglang.srt.plugins`: the plugin never loads "
                "(the doctor still reads their configs) | - |")
    return "\n".join(rows)


def readme_block(text: str) -> str:
    """The block between the markers in ``text``."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip()


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        found = readme_block((ROOT / "README.md").read_text(encoding="utf-8"))
        if found != matrix():
            print("README.md's support matrix differs from the release table; regenerate it with "
                  "`python3 tools/support_matrix.py` and paste it between the markers", file=sys.stderr)
            return 1
        return 0
    print(matrix())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
