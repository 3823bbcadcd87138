"""The fail-closed object against the installed SGLang's own code (issue 21 part 1): every family's stock
``set_eagle3_layers_to_capture`` (unwrapped, as a server without the plugin runs it) raises on it, the error
core/stock.py says. That SGLang hands it on to that call at startup: tests/engine/test_fail_closed_engine.py.
"""

from __future__ import annotations

import importlib
import inspect
from types import SimpleNamespace

import pytest

from sglang_eagle3_capture.core.config_keys import FAIL_CLOSED_IDS, IDS_KEY
from sglang_eagle3_capture.core.families import all_families
from sglang_eagle3_capture.core.stock import stock_sglang_capture

CASES = [(f.name, module, cls) for f in all_families() for module, cls in f.causal_lms]


@pytest.mark.parametrize("family, module, cls", CASES, ids=[f"{f}:{c}" for f, _, c in CASES])
def test_stock_set_eagle3_layers_to_capture_raises_on_the_fail_closed_object(family, module, cls, monkeypatch):
    mod = importlib.import_module(module)
    stock = inspect.unwrap(getattr(mod, cls).set_eagle3_layers_to_capture)  # the plugin's wrapper, if any, removed
    last = SimpleNamespace(is_last_rank=True)
    if hasattr(mod, "get_parallel"):  # MiniMax reads its pipeline group from the parallel state
        monkeypatch.setattr(mod, "get_parallel", lambda: SimpleNamespace(pp_group=last))
    model = SimpleNamespace(set_eagle3_layers_to_capture=lambda ids: None, layers_to_capture=[])
    config = SimpleNamespace(num_hidden_layers=6, text_config=SimpleNamespace(num_hidden_layers=6))
    # a multimodal wrapper's hook reads text_config and sets its language_model's list (Gemma 4's)
    fake = SimpleNamespace(pp_group=last, config=config, model=model, language_model=model)
    expected = stock_sglang_capture({"eagle_config": {IDS_KEY: dict(FAIL_CLOSED_IDS)}}, 6, family=family).problem
    with pytest.raises((KeyError, TypeError)) as e:
        stock(fake, dict(FAIL_CLOSED_IDS))
    shown = f"{type(e.value).__name__}: {e.value}"
    assert shown in expected, (shown, expected)

