"""The vLLM plugin's seams, probed in vLLM 0.33's and 0.34's wheel source (tools/static_seams.py ``--vllm``): the proof
behind "seam probe only" for the releases no CPU build exists of (0.32 runs through real vLLM in tests/engine).

Needs the package registry (``pip download --no-deps vllm==X``, cached under ~/.cache): marker ``network``. Reads the
source with ``ast``; imports and runs nothing from the wheel.
"""

import sys

import pytest

from sglang_eagle3_capture.core import releases
from support import REPO

sys.path.insert(0, str(REPO / "tools"))
import static_seams  # noqa: E402

WHEELS = ("0.33.0", "0.34.0")


@pytest.mark.network
@pytest.mark.parametrize("version", WHEELS)
def test_every_seam_of_the_release_file_matches_the_wheel(version):
    assert [(seam.role, problem) for seam, problem in static_seams.probe_vllm(version) if problem] == []


@pytest.mark.network
def test_034_has_no_v1_runner_so_the_release_file_names_only_the_gate():
    """0.34 removed the V1 model runner: the capture seams 0.32 and 0.33 carry are absent from its wheel, which is why
    the table refuses 0.34 (its gate, the same Worker.load_model, refuses a draft with a manifest there)."""
    source = static_seams.Source(static_seams.wheel("0.34.0", "vllm"))
    capture = [s for s in releases.vllm_get("0.33.0").seams if s.role in ("vllm.resolve", "vllm.feed")]
    assert [static_seams.check(source, s) for s in capture] == [f"{s.name} not found" for s in capture]
    assert not releases.vllm_get("0.34.0").supported
    assert [s.role for s in releases.vllm_get("0.34.0").seams] == ["vllm.gate"]


@pytest.mark.network
def test_the_probe_fails_on_a_seam_whose_parameters_differ():
    from dataclasses import replace

    source = static_seams.Source(static_seams.wheel("0.33.0", "vllm"))
    seam = releases.vllm_get("0.33.0").seam("vllm.feed")
    assert static_seams.check(source, replace(seam, params=seam.params[:-1])).startswith(
        "GPUModelRunner._model_forward has parameters")
