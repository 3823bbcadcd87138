"""The unit tier: tests that never import sglang (tests/unit/test_tiers.py checks the modules' imports)."""

import sys

import pytest


@pytest.fixture(autouse=True)
def _no_sglang_import(request):
    """Fail a unit test that imports sglang (seen when this tier runs first in its process, e.g. pytest tests/unit)."""
    before = "sglang" in sys.modules
    yield
    if not before and "sglang" in sys.modules:
        pytest.fail(f"{request.node.nodeid} imported sglang; a test that needs SGLang belongs in tests/inprocess/ or "
                    "tests/engine/")
