"""patches/sglang-<release>/: the source diff applies to the installed SGLang and captures what the plugin captures.

Which diff comes from the release table: the installed release's own directory when it has one, else the newest
release in the table that has one (named in the test's output and in its failure messages): a release added with
unchanged seams is served by the previous diff until a diff is written for it (docs/development.md).

The diff is applied (``git apply -p1``, as strict as ``patch --fuzz=0``) to a copy of ``site-packages/sglang``
(symlinks, with the touched files copied); a subprocess imports that copy, builds SGLang's ModelRunner on the tiny
target with no plugin loaded, and saves the aux tensors; this process computes them with the plugin. They must be
``torch.equal``: the diff and the plugin are two installations of one change.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import sglang_cpu_patches
import torch
from safetensors.torch import load_file

from harness.sglang_inprocess import get_runner
from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.config_keys import CONVENTION_KEY, IDS_KEY, LAYER_ID_CONVENTION
from sglang_eagle3_capture.core.sglang import target
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds
from support import REPO
from support.tiny_models import build_tiny_draft


def _diff_release() -> str:
    """The release whose diff this test applies: the installed one's if patches/ has it, else the newest that has."""
    def has_diff(version: str) -> bool:
        return (REPO / "patches" / f"sglang-{version}" / "eagle3-layer-id-capture.diff").is_file()

    installed = releases.installed_or_newest().version
    if has_diff(installed):
        return installed
    with_diff = [r.version for r in releases.supported() if has_diff(r.version)]
    assert with_diff, "patches/ holds no sglang-<release>/eagle3-layer-id-capture.diff for any release in the table"
    warnings.warn(f"patches/ has no diff for the installed SGLang {installed}; this test applies the newest one, "
                  f"sglang-{with_diff[-1]}/", stacklevel=1)
    return with_diff[-1]


DIFF_RELEASE = _diff_release()
DIFF = REPO / "patches" / f"sglang-{DIFF_RELEASE}" / "eagle3-layer-id-capture.diff"
PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13]]
ID_LISTS = [[3, -1, 1], [-1, 1, 3], [-1, 4], [5, -1, 1], [-1, 2, 5], [5],  # 5: the last layer (6 layers)
            ["final_norm", -1, 1], [-1, 2, 5, "final_norm"]]  # the final norm's output: its input's neighbour


def _touched(diff_text: str) -> list[str]:
    return [line[len("+++ b/"):] for line in diff_text.splitlines() if line.startswith("+++ b/")]


@pytest.fixture(scope="module")
def patched_copy(tmp_path_factory) -> Path:
    """``<tmp>/python/sglang``: the installed SGLang with the diff applied; returns ``<tmp>/python``."""
    import sglang

    installed = Path(sglang.__file__).parent
    root = tmp_path_factory.mktemp("sglang_copy")
    (root / "python").mkdir()
    subprocess.run(["cp", "-rs", str(installed), str(root / "python" / "sglang")], check=True, capture_output=True)
    text = DIFF.read_text()
    for rel in _touched(text):  # real files where the diff writes; the rest stay links to the wheel
        copied = root / rel
        copied.unlink()
        shutil.copy2(installed / Path(rel).relative_to("python/sglang"), copied)
    # git apply: strict like `patch --fuzz=0`, and works outside a repository; git is there wherever the repo is.
    proc = subprocess.run(["git", "apply", "-p1", "--verbose", "-"], input=text, text=True, cwd=root,
                          capture_output=True)
    assert proc.returncode == 0, (f"{DIFF.relative_to(REPO)} does not apply to the installed SGLang "
                                  f"{releases.installed_sglang_version()}: write patches/sglang-<installed>/ "
                                  f"(docs/development.md)\n{proc.stdout}{proc.stderr}")
    assert not list(root.rglob("*.rej")) and not list(root.rglob("*.orig"))
    return root / "python"


def test_diff_touches_only_what_the_plugin_patches():
    assert sorted(_touched(DIFF.read_text())) == sorted(f"python/sglang/srt/{p}" for p in (
        "layers/aux_hidden_states.py", "model_executor/model_runner.py",
        "model_executor/model_runner_components/attention_backend_setup.py",
        "model_executor/model_runner_components/spec_aux_hidden_state.py",
        "models/deepseek_v2.py", "models/kimi_k25.py"))
    assert DIFF.read_text().startswith("Explicit EAGLE-3 layer ids")  # a header for reviewers, before the hunks


SCRIPT = r"""
import json, sys
from types import SimpleNamespace
spec = json.loads(sys.argv[1])
import sglang
assert sglang.__file__.startswith(spec["copy"]), sglang.__file__
import torch
torch.set_num_threads(spec["threads"])  # this process's count: fp32 sums may round differently on another
from safetensors.torch import save_file
from sglang_eagle3_capture.core.sglang import target
from harness.sglang_inprocess import get_runner
from sglang.srt.layers.aux_hidden_states import EAGLE3_LAYER_ID_CONVENTION
from sglang.srt.models import kimi_k25

runner = get_runner(spec["target"])
out, result = {}, {"plugin_patched": target.is_patched()}
for n, ids in enumerate(spec["id_lists"]):
    runner.model.set_eagle3_layers_to_capture(ids, layer_id_convention=EAGLE3_LAYER_ID_CONVENTION)
    out[f"aux{n}"] = runner.prefill(spec["prompts"]).aux
kimi = SimpleNamespace(language_model=runner.model)
kimi_k25.KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture(
    kimi, spec["id_lists"][0], layer_id_convention=EAGLE3_LAYER_ID_CONVENTION)
out["kimi"] = runner.prefill(spec["prompts"]).aux
save_file({k: v.contiguous() for k, v in out.items()}, spec["out"])

from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import resolve_spec_aux_hidden_state_config
from sglang.srt.runtime_context import get_spec
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
with get_spec().override(speculative_draft_model_path=spec["draft"]):
    cfg = resolve_spec_aux_hidden_state_config(server_args=runner.model_runner.server_args,
        model_config=runner.model_runner.model_config, spec_algorithm=SpeculativeAlgorithm.EAGLE3,
        is_draft_worker=False)
    result["resolved"] = [cfg.eagle_aux_hidden_state_layer_ids, cfg.eagle_aux_hidden_state_layer_id_convention]
    try:
        resolve_spec_aux_hidden_state_config(server_args=runner.model_runner.server_args,
            model_config=runner.model_runner.model_config, spec_algorithm=SpeculativeAlgorithm.EAGLE,
            is_draft_worker=False)
    except ValueError as e:
        result["eagle_refusal"] = str(e)
try:
    runner.model.set_eagle3_layers_to_capture([-1, 6], layer_id_convention=EAGLE3_LAYER_ID_CONVENTION)
except ValueError as e:
    result["range_refusal"] = str(e)
print("RESULT " + json.dumps(result))
"""


def test_patched_copy_captures_exactly_what_the_plugin_captures(patched_copy, tiny_target_dir, tmp_path):
    ec = {"use_aux_hidden_state": True, IDS_KEY: ID_LISTS[0], CONVENTION_KEY: LAYER_ID_CONVENTION}
    draft = build_tiny_draft(tmp_path / "draft", target_dir=tiny_target_dir, num_aux=3,
                             config_overrides={"eagle_config": ec})
    out = tmp_path / "aux.safetensors"
    spec = {"copy": str(patched_copy), "target": str(tiny_target_dir), "draft": str(draft), "out": str(out),
            "id_lists": ID_LISTS, "prompts": PROMPTS,
            "threads": torch.get_num_threads()}  # an earlier test in this worker may have changed it (doctor --threads)
    env = sglang_cpu_patches.cpu_env()
    env["PYTHONPATH"] = os.pathsep.join([str(sglang_cpu_patches.SHIM_DIR), str(patched_copy), str(REPO)])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], env=env, capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("RESULT ")][0][7:])
    assert result["plugin_patched"] is False  # the copy alone, no plugin
    assert result["resolved"] == [ID_LISTS[0], LAYER_ID_CONVENTION]
    assert ("is an EAGLE-3 draft (LlamaForCausalLMEagle3); serve it with --speculative-algorithm EAGLE3"
            in result["eagle_refusal"])
    assert "must be unique and within [-1, 5] for a 6-layer target" in result["range_refusal"]
    theirs = load_file(str(out))

    runner = get_runner(tiny_target_dir)
    with target.patched():
        try:
            for n, ids in enumerate(ID_LISTS):
                runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds(ids, "test"))
                ours = runner.prefill(PROMPTS).aux
                assert torch.equal(theirs[f"aux{n}"], ours), ids
            runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds(ID_LISTS[0], "test"))
            assert torch.equal(theirs["kimi"], runner.prefill(PROMPTS).aux)
        finally:
            runner.reset_capture()
