"""The first-batch self-check through real servers on CPU: ``launch_server`` refusing a sabotaged capture on its
startup warmup request before it reports ready, and a newer-than-table SGLang presented to the installed one starting
unverified and self-checked before it reports ready. (It passing on every rank at TP 1 and TP 2, and staying off
for stock wiring, is test_plugin_engine.py's.)

The sabotage and the version presentation are test-only start-up hooks (tests/support/selfcheck_site/), applied in
SGLang's own processes after the plugin configured the model; the package has no switch for either.
"""


import pytest
from packaging.version import Version

from harness.servers import READY, Server
from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.manifest import Manifest, write_manifest
from support.hf_reference import hf_greedy
from support.servers import selfcheck_env
from support.tiny_models import build_tiny_draft

IDS = [5, -1, 1]  # on the 6-layer target: the last layer (final norm), the embedding, layer 1; a permuting feed
PROMPT = [5, 6, 7, 8, 9, 10]
PASSED = "eagle3-capture self-check passed"
FAILED = "eagle3-capture self-check FAILED on the first extend batch"


@pytest.fixture(scope="module")
def draft(tiny_target_dir, tmp_path_factory):
    path = build_tiny_draft(tmp_path_factory.mktemp("selfcheck") / "d", target_dir=tiny_target_dir,
                            num_aux=len(IDS))
    write_manifest(path, Manifest(tuple(IDS), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}))
    return path


def _passed(text: str) -> list[str]:
    return [line[line.index(PASSED):] for line in text.splitlines() if PASSED in line]


# One refusal start per mechanism: the permuted capture; the shifted one (each loop index one layer late) refuses
# through the same comparison (tests/unit/test_selfcheck_unit.py, tests/inprocess/test_selfcheck.py) and starts a
# server of its own only in make test-extended.
@pytest.mark.release
@pytest.mark.parametrize("kind", ["permute", pytest.param("shift", marks=pytest.mark.extended)])
def test_a_sabotaged_capture_is_refused_before_the_server_reports_ready(tiny_target_dir, draft, tmp_path, kind):
    with Server(tiny_target_dir, tmp_path / "server.log", draft=draft, env=selfcheck_env(sabotage=kind)) as server:
        ready = server.wait(timeout=600)
        rc = server.exit_code(timeout=180)
        text = server.text()
    assert f"TEST SABOTAGE {kind}" in text  # applied after the plugin configured the model
    assert not ready and READY not in text, text[-3000:]
    assert rc not in (None, 0)
    start = text.index(FAILED)
    message = text[start:start + 2000]
    assert f"DeploymentError: {draft / 'eagle3_manifest.json'}: field 'layer_ids': {FAILED}" in text  # file, field
    assert "(tp_rank 0, pid " in message and f"sglang {releases.installed_sglang_version()}; 3 tokens" in message
    assert f"layer ids {IDS})" in message
    assert "max |diff|" in message and "; fix: " in message and "SGLANG_EAGLE3_CAPTURE_SELFCHECK=0" in message
    if kind == "permute":  # the first two fc chunks swapped: the last layer's output and the embedding
        assert "fc chunk 0 (layer id 5) is not the output of decoder layer 5" in message
        assert "it is layer id -1's hidden state instead" in message
    else:  # loop indices [0, 2] -> [1, 3]: the embedding and layer 1 are each one layer late
        assert "fc chunk 1 (layer id -1) is not the embedding output" in message
        assert "fc chunk 2 (layer id 1) is not the output of decoder layer 1" in message


def test_a_newer_release_starts_unverified_and_self_checked(tiny_target_dir, draft, hf_target, tmp_path):
    major, minor, patch = (*Version(releases.newest().version).release, 0, 0)[:3]
    newer = f"{major}.{minor}.{patch + 1}"  # newer than the table's newest, whichever that is
    with Server(tiny_target_dir, tmp_path / "server.log", draft=draft,
                env=selfcheck_env(present_version=newer)) as server:
        assert server.wait(timeout=600), server.text()[-3000:]
        out = server.generate(PROMPT, max_new_tokens=4)
        text = server.text()
    assert out["output_ids"] == hf_greedy(hf_target, [PROMPT], 4)[0]
    assert f"sglang {newer} is newer than the release table" in text and "UNVERIFIED" in text
    (line,) = _passed(text)
    assert f"sglang {newer} (newer than the release table: patched as {releases.newest().version}, unverified" in line
    assert text.index(PASSED) < text.index(READY)  # checked on the warmup request, before it reported ready
