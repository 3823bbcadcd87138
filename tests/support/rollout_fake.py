"""A stand-in EAGLE-3 draft for the rollout tests (tests/unit/test_rollout.py, tests/inprocess/test_rollout_sglang.py):
its next-token distribution depends on the input token only."""

from __future__ import annotations

import pytest
import torch

from sglang_eagle3_capture.doctor import rollout

ROOT_TOKEN = 3  # the token every start row reads: its next-token distribution is the tree's step 0


class _Fake:
    """A stand-in draft: its next-token distribution depends on the input token only (``table[token]``), ids map
    to themselves (d2t = 0)."""

    def __init__(self, table: torch.Tensor):
        self.table = table
        self.layers = []

    @staticmethod
    def to_target_ids(x):
        return x


@pytest.fixture
def fake(monkeypatch):
    def install(table):
        table = torch.as_tensor(table, dtype=torch.float32)
        monkeypatch.setattr(rollout, "fc_input", lambda draft, aux: aux)
        monkeypatch.setattr(rollout, "_step", lambda draft, tokens, h, step, caches: (
            draft.table[tokens].log(), h.expand(*tokens.shape, h.shape[-1])))
        return _Fake(table)
    return install
