"""Test set-up shared by every tier: SGLang's CPU path, the CPU runtime, tiny models, seeding.

Tiers, one folder each (tests/unit/test_tiers.py holds them to it): ``unit/`` never imports sglang,
``inprocess/`` uses SGLang in this process (the ``runner`` fixture), ``engine/`` starts ``sglang.Engine``,
servers or other SGLang subprocesses (marked ``engine``). Test helpers live in the ``support`` package; what the
benchmarks use too (the in-process runner, ``launch_server``, the CPU set-up) lives in ``harness/`` beside
cpu_runtime/. ``pythonpath`` in pyproject.toml puts the repository root (``fixtures``, ``harness``) and tests/
(``support``) on sys.path.

At import time (before any test module imports sglang) :func:`harness.use_cpu_runtime` puts the repository's
``cpu_runtime/`` first on ``sys.path`` and on ``PYTHONPATH`` (so SGLang's spawned processes get the stub
``sgl_kernel`` and the ``sitecustomize`` patch hook), sets the environment in ``sglang_cpu_patches.CPU_ENV``, and
installs the same import hook here, so B1... are applied in this process as soon as SGLang imports the patched
modules (tests that never import sglang stay fast).
"""

import random
from pathlib import Path

import pytest

import harness  # the repository root is on sys.path (pyproject's pythonpath); standard library only

harness.use_cpu_runtime()  # before any test module imports sglang: the stub sgl_kernel first, B1... on import
import torch  # noqa: E402

from support.tiny_models import build_tiny_draft, build_tiny_target  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same RNG state."""
    random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory) -> Path:
    """A 6-layer fp32 tiny DeepSeek-V3 checkpoint (support/tiny_models.py), built once per session."""
    return build_tiny_target(tmp_path_factory.mktemp("tiny_target"), num_hidden_layers=6)


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory, tiny_target_dir) -> Path:
    """A tiny random EAGLE-3 draft for ``tiny_target_dir`` capturing loop indices [0, 2, 4]."""
    return build_tiny_draft(tmp_path_factory.mktemp("tiny_draft"), target_dir=tiny_target_dir,
                            eagle_aux_layer_ids=[0, 2, 4])


@pytest.fixture(scope="session")
def hf_target(tiny_target_dir):
    """transformers' DeepseekV3ForCausalLM loaded from ``tiny_target_dir`` (fp32), the reference model."""
    from support.hf_reference import load_hf

    return load_hf(tiny_target_dir)


@pytest.fixture(scope="session")
def runner(tiny_target_dir):
    """SGLang's own ModelRunner on ``tiny_target_dir`` in this process (support/sglang_inprocess.py: one per
    process); it also publishes SGLang's runtime context here. Tests that reconfigure capture call
    ``runner.reset_capture()`` when done. Only tests in tests/inprocess/ use it."""
    from harness.sglang_inprocess import get_runner

    return get_runner(tiny_target_dir)


@pytest.fixture(scope="session")
def forked():
    """This worker's fork server (support/forked.py): runs an SGLang-side body in a fresh child of one interpreter
    that imported torch and SGLang once; started on first use."""
    from support.forked import ForkServer

    server = ForkServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def speculators_draft(tmp_path_factory) -> Path:
    """A draft written by speculators' own Eagle-3 classes (Kimi-K2.5 shaped, fc trained on HF [0, 3, 31]);
    shared read-only: copy it before changing it."""
    from support.speculators_drafts import build_speculators_draft

    return build_speculators_draft(tmp_path_factory.mktemp("spec") / "draft")


@pytest.fixture(scope="session")
def kimi_target(tmp_path_factory) -> Path:
    """A Kimi-K2.5 target config directory (support/speculators_drafts.py) for the speculators draft."""
    from support.speculators_drafts import write_target

    return write_target(tmp_path_factory.mktemp("kimi"))

