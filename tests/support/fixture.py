"""The committed end-to-end fixtures (fixtures/tiny: DeepSeek-V3; fixtures/tiny-llama: Llama; both built by
fixtures/build_fixture.py from fixtures/specs.py): where they are, a draft as SGLang serves it, and the criteria
measured again from the weights."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures.criteria import measure_criteria
from fixtures.language import Language
from fixtures.samples import make_batch
from fixtures.specs import SPECS
from sglang_eagle3_capture.doctor.model import Eagle3Draft

FIXTURE = SPECS["tiny"].directory  # the DeepSeek-V3 fixture, the one the other tests use
FIXTURE_NAMES = tuple(SPECS)  # every bundled fixture, for tests parametrized over them


def fixture_dir() -> Path:
    """The tiny end-to-end fixture (``EAGLE3_FIXTURE_DIR`` overrides; built by fixtures/build_fixture.py)."""
    d = Path(os.environ.get("EAGLE3_FIXTURE_DIR", FIXTURE))
    if not (d / "fixture.json").is_file():
        pytest.fail(f"{d}/fixture.json is missing; build the fixture with `python fixtures/build_fixture.py --out {d}`")
    return d


def load_fixture_draft(fixture_dir: Path, target) -> Eagle3Draft:
    """The draft as SGLang serves it: the target's embedding replaces the draft's copy."""
    return Eagle3Draft.from_pretrained(fixture_dir / "draft", target_embed=target.model.embed_tokens.weight.detach())


def remeasure(fixture_dir: Path, info: dict, target) -> dict:
    """The criteria on the held-out split named in ``info`` (fixture.json), from the weights in ``fixture_dir``."""
    heldout = make_batch(target, Language(**info["language"]), info["heldout"]["n"], info["heldout"]["seed"])
    return measure_criteria(load_fixture_draft(fixture_dir, target), heldout, info["training_layer_ids"],
                            info["num_hidden_layers"])
