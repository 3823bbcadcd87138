"""The user docs: the README's support matrix is the release table's, the README stays short, and nothing in the
repository points outside it (to notes a clone does not have)."""

import re
import subprocess
import sys

from support import REPO

OUTSIDE = ("shared/notes", "DESIGN.md", "FINDINGS")  # notes and files a clone does not have


def test_readme_support_matrix_is_generated_from_the_release_table():
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "support_matrix.py"), "--check"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr


def test_readme_is_short_and_its_doc_links_exist():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for link in set(re.findall(r"docs/[\w-]+\.md", text)):
        assert (REPO / link).is_file(), link


def test_nothing_points_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    offenders = []
    for name in tracked:
        if not name.endswith((".py", ".md", ".toml", ".cfg", ".txt")) or name.startswith("fixtures/tiny"):
            continue
        if name == "tests/unit/test_docs.py":  # this file names what it looks for
            continue
        text = (REPO / name).read_text(errors="replace")
        if any(ref in text for ref in OUTSIDE):
            offenders.append(name)
    assert offenders == []
