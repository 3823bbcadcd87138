"""Multi-step and tree EAGLE-3 drafting on CPU (cpu_runtime B7: multi-step draft decode backend for torch_native,
B8: tree-masked target verify) through ``sglang.Engine``, on both bundled fixtures, with the plugin.

In make test: the plugin under a chain (3/1/4, TP 1) and a tree (3/2/6, TP 2, gloo), both in one subprocess:
fixtures/tiny's draft with a manifest [-1, 1, 4] as its only layer ids; what the target hands the draft (the
plugin's dump of the prefill and target-verify batches) and what the draft's fc is fed (a test-only spy in the
engine's processes, the draft-extend batches after prefill and after each verify) equal HF hidden_states[0, 2, 5] at
the rows of the committed and accepted tokens, the embedding bit-exact; greedy output equals HF's; SGLang reports
the setting it ran; some verify accepts more than one draft token; the first-batch self-check passes on every rank.

In make test-extended (marker ``extended``), the grid: per fixture one subprocess runs a plain Engine, then one
Engine per speculative setting on the same prompts: greedy output with speculation must equal greedy output
without it, token for token (what makes the CPU runtime trustworthy), SGLang's server_info reports the setting,
and some verify accepts more than one draft token.
"""

import json

import pytest

from fixtures.specs import SPECS
from support.engine_harness import engine_run, greedy, run_engines

MAX_NEW_TOKENS = 16
NUM_PROMPTS = 2
# (steps, topk, draft tokens): chains and trees, split over the fixtures to keep this module near 4 minutes.
SETTINGS = {
    "tiny": [(3, 1, 4), (3, 2, 6), (4, 4, 16)],
    "tiny-llama": [(5, 1, 6), (2, 4, 8)],
}
CASES = [(name, setting) for name, settings in SETTINGS.items() for setting in settings]


def _spec_kwargs(fixture_dir, steps, topk, draft_tokens) -> dict:
    return dict(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(fixture_dir / "draft"),
                speculative_num_steps=steps, speculative_eagle_topk=topk, speculative_num_draft_tokens=draft_tokens)


@pytest.fixture(scope="module")
def runs():
    """{fixture name: {None: the plain run, (steps, topk, draft tokens): that EAGLE-3 run}}."""
    out = {}
    for name, settings in SETTINGS.items():
        directory = SPECS[name].directory
        prompts = json.loads((directory / "prompts.json").read_text())[:NUM_PROMPTS]
        described = [engine_run(directory / "target", prompts, sampling_params=greedy(MAX_NEW_TOKENS))]
        described += [engine_run(directory / "target", prompts, sampling_params=greedy(MAX_NEW_TOKENS),
                                 engine_kwargs=_spec_kwargs(directory, *s)) for s in settings]
        results = run_engines(described, plugins="eagle3_capture", timeout=900)
        out[name] = dict(zip([None, *settings], results))
    return out


def _tokens(run):
    return [o["output_ids"] for o in run["outputs"]]


# The grid (its seven Engines took 520 s of CI) is make test-extended's; make test keeps the capture cases below (a
# chain at TP 1 and a tree at TP 2, greedy output equal to HF's, the setting SGLang reports, more than one draft
# token accepted, and the fc fed HF hidden states), and test_final_norm_engine.py a chain at TP 2 and a tree at TP 1.
@pytest.mark.extended
@pytest.mark.parametrize(("name", "setting"), CASES, ids=[f"{n}-{s[0]}-{s[1]}-{s[2]}" for n, s in CASES])
def test_speculative_greedy_equals_plain(runs, name, setting):
    plain, spec = runs[name][None], runs[name][setting]
    assert len(set(map(tuple, _tokens(plain)))) == NUM_PROMPTS  # distinct continuations: equality means something
    assert _tokens(spec) == _tokens(plain)


@pytest.mark.extended
@pytest.mark.parametrize(("name", "setting"), CASES, ids=[f"{n}-{s[0]}-{s[1]}-{s[2]}" for n, s in CASES])
def test_server_info_reports_the_setting(runs, name, setting):
    info = runs[name][setting]["server_info"]
    steps, topk, draft_tokens = setting
    assert info["speculative_algorithm"] == "EAGLE3"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == (steps, topk, draft_tokens)
    assert info["attention_backend"] == "torch_native"


@pytest.mark.extended
@pytest.mark.parametrize(("name", "setting"), CASES, ids=[f"{n}-{s[0]}-{s[1]}-{s[2]}" for n, s in CASES])
def test_multi_step_draft_accepts_more_than_one_token(runs, name, setting):
    run = runs[name][setting]
    metas = [o["meta_info"] for o in run["outputs"]]
    for meta in metas:
        assert meta["completion_tokens"] == MAX_NEW_TOKENS and meta["spec_verify_ct"] >= 1
        assert meta["spec_accept_length"] == pytest.approx(meta["completion_tokens"] / meta["spec_verify_ct"])
        # Each verify proposes one draft token per step: a chain of `steps`, the best `steps` levels of a tree.
        assert 0 <= meta["spec_num_correct_drafts"] <= meta["spec_verify_ct"] * setting[0]
    # A 1-step chain accepts at most 2 tokens per verify; more means the draft's later steps were accepted.
    assert max(m["spec_accept_length"] for m in metas) > 2
    # The scheduler's lifetime average (folded every decode_log_interval step, so its exact count of verify steps
    # depends on when the batch finished) is over 1 too.
    assert run["server_info"]["internal_states"][0]["avg_spec_accept_length"] > 1


# --- The plugin under multi-step settings: what the draft's fc is fed, checked against HF -------------------------

CAPTURE_IDS = (-1, 1, 4)  # on fixtures/tiny's 7-layer target: the embedding, layers 1 and 4 (HF hidden_states 0, 2, 5)
# (steps, topk, draft tokens, tp_size): a chain at TP 1 and a tree at TP 2 (gloo; B4). test_final_norm_engine.py
# runs the other two (a chain at TP 2, a tree at TP 1) on a Llama target.
CAPTURE_CASES = [(3, 1, 4, 1), (3, 2, 6, 2)]
PASSED = "eagle3-capture self-check passed"

# A start-up hook for the engine's processes, written into the test's tmp dir and put first on PYTHONPATH (Python
# imports the first sitecustomize it finds, so it installs the CPU runtime's patches itself): it writes what the
# draft's fc gets (LlamaModel.forward's spec_info.hidden_states when they are the target's aux states, i.e. the
# draft-extend batches) with the batch's input ids, positions and forward mode.
FC_SPY = '''
import json, os, sys
import sglang_cpu_patches
from sglang_eagle3_capture.core.after_import import when_imported

sglang_cpu_patches.install_import_hook()


def _spy():
    import torch
    from safetensors.torch import save_file

    cls = sys.modules["sglang.srt.models.llama_eagle3"].LlamaModel
    original, directory, count = cls.forward, os.environ["EAGLE3_TEST_FC_DUMP"], [0]

    def forward(self, input_ids, positions, forward_batch, *args, **kwargs):
        h = forward_batch.spec_info.hidden_states
        if h is not None and h.shape[0] and h.shape[-1] == self.fc.in_features != self.fc.out_features:
            stem = os.path.join(directory, f"pid{os.getpid()}-{count[0]:03d}")
            count[0] += 1
            save_file({"fc_input": h.detach().float().contiguous(), "input_ids": input_ids.detach().clone(),
                       "positions": positions.detach().clone()}, stem + ".safetensors")
            with open(stem + ".json", "w") as f:
                json.dump({"forward_mode": forward_batch.forward_mode.name, "pid": os.getpid()}, f)
        return original(self, input_ids, positions, forward_batch, *args, **kwargs)

    cls.forward = forward


when_imported("sglang.srt.models.llama_eagle3", _spy)
'''


def _capture_draft(root):
    """fixtures/tiny's draft, its layer ids declared by a manifest [-1, 1, 4] only (none left in config.json)."""
    import shutil

    from sglang_eagle3_capture.core.manifest import Manifest, write_manifest

    src = SPECS["tiny"].directory / "draft"
    d = root / "draft"
    d.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(src / name, d / name)
    config = json.loads((d / "config.json").read_text())
    config.pop("eagle_aux_hidden_state_layer_ids", None)
    (d / "config.json").write_text(json.dumps(config, indent=2))
    target = json.loads((SPECS["tiny"].directory / "target" / "config.json").read_text())
    write_manifest(d, Manifest(CAPTURE_IDS, target["architectures"][0], target["num_hidden_layers"],
                               target["hidden_size"], {"source": "manual"}))
    return d


def _batches(directory, pattern):
    from safetensors.torch import load_file

    out = []
    for meta_path in sorted(directory.glob(pattern)):
        out.append((load_file(str(meta_path.with_suffix(".safetensors"))), json.loads(meta_path.read_text())))
    return out


def _accepted_rows(input_ids, positions, sequence, shift):
    """Rows of one batch that carry the final sequence's token ``position + shift`` (the target reads token p at
    position p; the draft reads token p + 1 beside the target's state at p), walked from the batch's first position
    on and stopping at the first position no row matches: the committed and the accepted tokens. A rejected branch
    may repeat a token at a position the walk covers, hence every match is returned and the caller needs one of
    them to agree. {position: [rows]}."""
    rows = {}
    ids, pos = input_ids.tolist(), positions.tolist()
    for p in range(min(pos), max(pos) + 1):
        hits = [r for r, (t, q) in enumerate(zip(ids, pos))
                if q == p and q + shift < len(sequence) and t == sequence[q + shift]]
        if not hits:
            break
        rows[p] = hits
    return rows


def _check_feed(tensors, key, meta, sequence, hf, hidden, shift):
    """At every accepted row, each fc chunk equals HF's hidden state its layer id names (the embedding bit-exact)."""
    import torch

    from sglang_eagle3_capture.core.layer_ids import hidden_state_index
    from support.tolerances import TOLERANCES

    accepted = _accepted_rows(tensors["input_ids"], tensors["positions"], sequence, shift)
    assert accepted, (meta, tensors["input_ids"].tolist(), tensors["positions"].tolist())
    for p, rows in accepted.items():
        def agrees(r, p=p):
            chunks = tensors[key][r].float().split(hidden)
            return torch.equal(chunks[0], hf[0][p]) and all(
                torch.allclose(c, hf[hidden_state_index(i)][p], **TOLERANCES[torch.float32])
                for c, i in zip(chunks[1:], CAPTURE_IDS[1:]))
        assert any(agrees(r) for r in rows), (meta["forward_mode"], p, rows)
    return len(accepted)


# The chain is release-marked: on the older releases CI runs it is their multi-step proof (greedy output equal to
# HF's, the fc fed HF hidden states in every batch kind, the self-check passing), in place of a benchmark gate.
_CASE_PARAMS = [pytest.param(c, id=f"{c[0]}-{c[1]}-{c[2]}-tp{c[3]}",
                             marks=[pytest.mark.release] if c == (3, 1, 4, 1) else []) for c in CAPTURE_CASES]


@pytest.fixture(scope="module")
def captured(request, tmp_path_factory):
    """The selected capture cases' Engines, one after another in one subprocess: ``{case: (result, its capture
    dump, its fc spy dump, its prompt)}`` (a case -m deselects, e.g. the TP 2 tree under -m release, is not run)."""
    import os

    import sglang_cpu_patches

    selected = [c for c in CAPTURE_CASES
                if any(getattr(item, "callspec", None) is not None and item.callspec.params.get("case") == c
                       and item.module is request.module for item in request.session.items)]
    directory = SPECS["tiny"].directory
    prompt = json.loads((directory / "prompts.json").read_text())[0]
    root = tmp_path_factory.mktemp("multistep_capture")
    draft = _capture_draft(root)
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FC_SPY)
    runs, out = [], {}
    for case in selected:
        *setting, tp = case
        name = "-".join(map(str, case))
        dump, fc_dump = root / f"dump-{name}", root / f"fc-{name}"
        fc_dump.mkdir()
        env = {"PYTHONPATH": os.pathsep.join([str(site), sglang_cpu_patches.cpu_env()["PYTHONPATH"]]),
               "EAGLE3_TEST_FC_DUMP": str(fc_dump),
               "SGLANG_EAGLE3_CAPTURE_DUMP": str(dump), "SGLANG_EAGLE3_CAPTURE_DUMP_MAX": "64"}
        if tp == 2:
            env["SGLANG_CPU_OMP_THREADS_BIND"] = "0|1"
        runs.append(engine_run(directory / "target", [prompt], sampling_params=greedy(MAX_NEW_TOKENS), env=env,
                               engine_kwargs={**_spec_kwargs(directory, *setting), "tp_size": tp,
                                              "speculative_draft_model_path": str(draft), "log_level": "info"}))
        out[case] = (dump, fc_dump)
    results = run_engines(runs, plugins="eagle3_capture", timeout=1500)
    return {case: (result, *out[case], prompt) for case, result in zip(selected, results)}


@pytest.mark.parametrize("case", _CASE_PARAMS)
def test_plugin_feeds_hf_hidden_states_under_multi_step(case, captured):
    """Manifest [-1, 1, 4]: the target's dumped aux states (prefill and target-verify batches) and the draft's fc
    input (draft-extend batches) equal HF hidden_states[0, 2, 5] at the rows of the committed and accepted tokens;
    the self-check passes on every rank; output equals HF greedy; SGLang reports the setting it ran, and some verify
    accepted more than one draft token."""
    import torch

    from fixtures.samples import load_target
    from support.hf_reference import hf_greedy, hf_layer_outputs

    *setting, tp = case
    result, dump, fc_dump, prompt = captured[case]
    info = result["server_info"]
    assert info["speculative_algorithm"] == "EAGLE3" and info["attention_backend"] == "torch_native"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"],
            info["speculative_num_draft_tokens"]) == tuple(setting)
    directory = SPECS["tiny"].directory
    target = load_target(directory / "target")
    output = result["outputs"][0]["output_ids"]
    assert output == hf_greedy(target, [prompt], MAX_NEW_TOKENS)[0]
    sequence = prompt + output
    with torch.no_grad():
        hf = hf_layer_outputs(target, sequence)
    hidden = target.config.hidden_size

    target_batches = _batches(dump, "tp*.json")
    ranks = sorted({meta["tp_rank"] for _, meta in target_batches})
    assert ranks == list(range(tp))
    modes = {}
    for tensors, meta in target_batches:
        assert meta["layer_ids"] == list(CAPTURE_IDS)
        n = _check_feed(tensors, "aux_hidden_states", meta, sequence, hf, hidden, shift=0)
        modes.setdefault(meta["forward_mode"], []).append(n)
    assert set(modes) == {"EXTEND", "TARGET_VERIFY"}, modes
    draft_batches = _batches(fc_dump, "pid*.json")
    for tensors, meta in draft_batches:
        n = _check_feed(tensors, "fc_input", meta, sequence, hf, hidden, shift=1)
        modes.setdefault("draft:" + meta["forward_mode"], []).append(n)
    assert "draft:EXTEND" in modes and "draft:DRAFT_EXTEND_V2" in modes, modes  # after prefill, after verify
    # Multi-step really ran with the plugin's feed: some verify accepted two draft tokens (rows: the root + 2).
    assert max(modes["TARGET_VERIFY"]) > 2, modes
    assert result["outputs"][0]["meta_info"]["spec_accept_length"] > 1
    passed = [line for line in result["log"].splitlines() if PASSED in line]
    assert sorted(int(line.split("(tp_rank ")[1].split(",")[0]) for line in passed) == list(range(tp)), passed
    print(f"{setting} tp{tp}: accepted rows per batch {modes}; accept length "
          f"{result['outputs'][0]['meta_info']['spec_accept_length']:.2f}")
