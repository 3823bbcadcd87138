#!/usr/bin/env python3
"""The cache key of an SGLang environment: a hash of what decides its contents, and nothing else.

That is this project's declared requirements (``[project] dependencies`` and ``optional-dependencies`` in
pyproject.toml, not the rest of the file: a pytest marker or a ruff setting changes no installed package),
``tools/install_sglang.py`` and ``tools/constraints.txt``. The Makefile and ``.ci/run`` both call this, so a
developer's and CI's environments are keyed alike. ``env_key.py vllm`` prints the vLLM environment's key
(:func:`vllm_env_key`). Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def vllm_env_key() -> str:
    """The vLLM environment's key: its recipe, ``tools/install_vllm.py``, and the installer settings it shares with
    ``tools/install_sglang.py`` (this package goes in with ``--no-deps``, so its declared requirements do not decide
    the environment's contents)."""
    h = hashlib.sha256()
    for name in ("tools/install_vllm.py", "tools/install_sglang.py"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()[:12]


def env_key() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {"dependencies": project.get("dependencies", []),
                "optional-dependencies": project.get("optional-dependencies", {})}
    h = hashlib.sha256(json.dumps(declared, sort_keys=True).encode())
    for name in ("tools/install_sglang.py", "tools/constraints.txt"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()[:12]


if __name__ == "__main__":
    import sys

    print(vllm_env_key() if sys.argv[1:] == ["vllm"] else env_key())
