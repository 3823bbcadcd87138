"""The engine tier: every test here starts sglang.Engine, a server or another SGLang subprocess."""

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before -m filters the items
def pytest_collection_modifyitems(items):
    """Mark every test collected from this folder ``engine`` (``-m "not engine"`` deselects the tier)."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.engine)
