"""The vLLM plugin's seams, probed in vLLM 0.33's and 0.34's wheel source (tools/static_seams.py ``--vllm``): the proof
behind "seam probe only" for the releases no CPU build exists of (0.32 runs through real vLLM in tests/engine).

Needs the package registry (``pip download --no-deps vllm==X``, cached under ~/.cache): marker ``network``. Reads the
source with ``ast``; imports and runs nothing from the wheel.
"""

import ast
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
def test_034_has_no_v1_runner_so_the_release_file_names_no_capture_seam():
    """0.34 removed the V1 model runner: the capture seams 0.32 and 0.33 carry are absent from its wheel, so 0.34's
    release file names none (its gate verifies Model Runner V2 instead, whose class the other test probes)."""
    source = static_seams.Source(static_seams.wheel("0.34.0", "vllm"))
    capture = [s for s in releases.vllm_get("0.33.0").seams if s.role in ("vllm.resolve", "vllm.feed")]
    assert [static_seams.check(source, s) for s in capture] == [f"{s.name} not found" for s in capture]
    assert {s.role for s in releases.vllm_get("0.34.0").seams} == {"vllm.gate", "vllm.v2", "vllm.metrics.init",
                                                                    "vllm.metrics.observe"}


def _method_source(source, module: str, owner: str, attr: str) -> str:
    node, _ = source.find(module, owner, attr)
    return ast.unparse(node)


@pytest.mark.network
@pytest.mark.parametrize("version", WHEELS)
def test_what_the_gate_reads_on_model_runner_v2_is_in_the_wheel(version):
    """The facts wiring.verify_v2 relies on, in each wheel's source: V2's load_model sets the captured indices and
    then loads the drafter (so the gate, after it, reads both); the drafter concatenates the captures in list order;
    the decoder stack keeps them, sorted, under the release table's ``aux_layers`` name."""
    source = static_seams.Source(static_seams.wheel(version, "vllm"))
    release = releases.vllm_get(version)
    seam = release.seam("vllm.v2")
    load = _method_source(source, seam.module, seam.owner, seam.attr)
    assert 0 <= load.index("set_eagle3_aux_hidden_state_layers(self.model") < load.index(
        "self.speculator.load_model(self.model)")
    propose = _method_source(source, "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator",
                             "TargetDependentARSpeculator", "propose")
    assert "self.model.combine_hidden_states(torch.cat(aux_hidden_states, dim=-1))" in propose
    keep = _method_source(source, "vllm.model_executor.models.interfaces", "EagleModelMixin",
                          "_set_aux_hidden_state_layers")
    assert f"self.{release.stack['aux_layers']} = tuple(sorted(set(layers)))" in keep


@pytest.mark.network
def test_the_probe_fails_on_a_seam_whose_parameters_differ():
    from dataclasses import replace

    source = static_seams.Source(static_seams.wheel("0.33.0", "vllm"))
    seam = releases.vllm_get("0.33.0").seam("vllm.feed")
    assert static_seams.check(source, replace(seam, params=seam.params[:-1])).startswith(
        "GPUModelRunner._model_forward has parameters")
