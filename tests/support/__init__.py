"""Helpers shared by the test tiers; no tests here, and nothing in this package imports a test module.

- ``tiny_models``: tiny seeded checkpoints (a DeepSeek-V3 target, a Llama EAGLE-3 draft);
- ``kimi_k25``: a tiny Kimi-K2.5 target (``KimiK25ForConditionalGeneration``), and transformers' model of it;
- ``hf_reference``: HF transformers' model as the reference for SGLang's outputs;
- ``tolerances``: the one table of numeric tolerances;
- ``engine_harness`` (+ ``engine_worker``, the script it runs): ``sglang.Engine`` in a subprocess;
- ``draft_dirs``: draft directories for the draft-head loader tests, loaded with SGLang's own loader;
- ``speculators_drafts``: drafts written by speculators' own classes and SpecForge-format drafts;
- ``cli``: running the command line in-process; ``fixture``: the committed tiny fixture (fixtures/tiny).
- ``servers``: ``selfcheck_site/``, the self-check engine tests' start-up hook for ``launch_server`` (sabotage after
  configuration, a presented SGLang version).

What the benchmarks use too lives in harness/ beside cpu_runtime/ (never shipped): ``harness.sglang_inprocess``
(SGLang's ModelRunner in the test process: the ``runner`` fixture) and ``harness.servers`` (``launch_server`` on CPU).

:func:`subprocess_env` is the environment for a child Python that needs the CPU runtime and, as pytest
has them (``pythonpath`` in pyproject.toml), ``import fixtures`` and ``import support``.
"""

from __future__ import annotations

import os
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO = TESTS_DIR.parent


def subprocess_env(base=None) -> dict:
    """``sglang_cpu_patches.cpu_env(base)`` (cpu_runtime first on PYTHONPATH) with the repo root and tests/ after it."""
    import sglang_cpu_patches

    env = sglang_cpu_patches.cpu_env(base)
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(REPO), str(TESTS_DIR)])
    return env
