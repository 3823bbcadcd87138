"""The draft speculators' own trainer produced (fixtures/tiny-llama/speculators/, built by
fixtures/speculators_trained.py), read by this package and by speculators itself.

Fast: the committed files are speculators' own (its classes load them, nothing missing or unexpected) and what the
builder's settings say; the builder's hidden states are what speculators wants (the last entry is the final norm's
input, taken here with a hook of this test's own); ``convert`` reads the trainer's ids (``[0, 5, 7]``, 7 = N read as
the pre-norm layer 6 because the fc takes three states) and moves every tensor unchanged; ``verify`` on speculators'
data layout, where the last layer is stored twice, reads the copy as one tensor. Marked ``fixture``: speculators'
own validation code, run here on held-out samples, counts exactly what ``verify`` reports as speculators' figure,
and ``verify``'s out-of-vocabulary count is the labels outside ``t2d``, on the legacy layout and on speculators' own
(its table's loss mask). Marked ``slow``: the builder run again (make test-slow) meets the criteria.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from fixtures import speculators_trained as st
from fixtures.language import Language
from fixtures.samples import load_target, make_batch, make_samples
from sglang_eagle3_capture.doctor.convert import convert
from sglang_eagle3_capture.doctor.verify import verify

TARGET = st.FIXTURE / "target"
HELDOUT_SEED = 6  # fixtures/tiny-llama/prompts.json's prompts: the ones the engine test serves
MAX_COMMITTED_BYTES = 512 * 1024
# speculators' validation and verify's copy of it run the same fp32 math with different kernels (SDPA with a dense
# mask there, a plain softmax here): an argmax may flip where two draft logits tie to rounding, nothing more.
FLIPS = 2


@pytest.fixture(scope="module")
def build() -> dict:
    return json.loads((st.OUT / "build.json").read_text())


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert(st.OUT, tmp_path_factory.mktemp("conv") / "sglang", target=TARGET)


def test_committed_checkpoint_is_speculators_own(build):
    from speculators.models.eagle3.core import Eagle3DraftModel

    files = {p.name for p in st.OUT.iterdir()}
    assert files == set(st.COMMITTED) | {"build.json"}
    assert sum(p.stat().st_size for p in st.OUT.iterdir()) < MAX_COMMITTED_BYTES
    cfg = json.loads((st.OUT / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["speculators_version"] == build["versions"]["speculators"]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == list(st.SPECULATORS_IDS)
    assert cfg["draft_vocab_size"] == st.DRAFT_VOCAB_SIZE and cfg["fc_norm"] and not cfg["norm_before_fc"]
    config = Eagle3DraftModel.config_class.from_pretrained(st.OUT)
    config.speculators_config.verifier.name_or_path = str(TARGET)
    own = Eagle3DraftModel(config).state_dict()  # speculators' model for the committed config
    saved = load_file(str(st.OUT / "model.safetensors"))
    assert set(saved) == set(own) - set(Eagle3DraftModel._keys_to_ignore_on_save)
    assert all(saved[n].shape == own[n].shape for n in saved)
    model = Eagle3DraftModel.from_pretrained(st.OUT, config=config)  # and its loader takes the files
    assert int(model.t2d.sum()) == st.DRAFT_VOCAB_SIZE and torch.equal(model.fc.weight, saved["fc.weight"])
    val = json.loads((st.OUT / "val_metrics.json").read_text())
    assert 0.0 < val["full_acc_0_epoch"] <= 1.0
    # the options fixtures/speculators_cpu.py documents, in the recorded command
    for option in ("--draft-attn-impl", "--loss-implementation", "--hidden-states-dtype", "--num-workers"):
        assert option in build["train_command"]


def test_hidden_states_end_with_the_final_norms_input():
    """The builder's rows: entries at speculators' ids are HF ``hidden_states`` at those indices, and the last is the
    input of the target's final norm (hooked here), whose output is HF's post-norm ``hidden_states[N]``."""
    model = load_target(TARGET)
    batch = make_batch(model, st.language(), 4, HELDOUT_SEED)
    rows = st.hidden_state_rows(batch)
    for b, row in enumerate(rows):
        ids = row["token_ids"][None]
        seen = {}
        hook = model.model.norm.register_forward_pre_hook(lambda m, args: seen.__setitem__("in", args[0]))
        try:
            with torch.no_grad():
                out = model(input_ids=ids, output_hidden_states=True)
        finally:
            hook.remove()
        hs = row["hidden_states"]
        n = model.config.num_hidden_layers
        assert hs.shape == (ids.shape[1], len(st.SPECULATORS_IDS) + 1, model.config.hidden_size)
        for j, i in enumerate(st.SPECULATORS_IDS[:-1]):
            torch.testing.assert_close(hs[:, j], out.hidden_states[i][0], atol=1e-5, rtol=1e-5)
        assert torch.equal(hs[:, 0], model.model.embed_tokens.weight[row["token_ids"]])  # index 0: the embedding
        torch.testing.assert_close(hs[:, -1], seen["in"][0], atol=1e-5, rtol=1e-5)  # pre-norm, N = 7
        assert torch.equal(hs[:, -1], hs[:, len(st.SPECULATORS_IDS) - 1])  # ids end with N: the fc's last input
        with torch.no_grad():
            torch.testing.assert_close(model.model.norm(hs[:, -1]), out.hidden_states[n][0], atol=1e-5, rtol=1e-5)
        assert (hs[:, -1] - out.hidden_states[n][0]).abs().max() > 0.1  # HF's index N is the norm's output


def test_convert_reads_the_trainers_ids_and_moves_every_tensor_unchanged(converted):
    m = converted.manifest
    assert m.layer_ids == st.LAYER_IDS and m.provenance["source"] == "speculators-config"
    assert m.provenance["original_ids"] == list(st.SPECULATORS_IDS) and "fail_closed" in m.provenance
    src = load_file(str(st.OUT / "model.safetensors"))
    out = load_file(str(converted.dst / "model.safetensors"))
    assert {n.replace("layers.0.", "midlayer.") for n in src} == set(out)
    assert all(torch.equal(t, out[n.replace("layers.0.", "midlayer.")]) for n, t in src.items())


def test_verify_reads_a_tensor_stored_twice_as_one(converted, tmp_path):
    """speculators' layout with N among the fc ids stores the last layer twice (fc input and target state); wirings
    that differ only in which copy they read are one, so they cannot tie with the manifest's."""
    st.write_data(TARGET, tmp_path / "data", n=8, seed=HELDOUT_SEED)
    r = verify(converted.dst, [tmp_path / "data" / "hidden_states"], target=TARGET, progress=False)
    names = r.chunk_names
    assert any(names[3] in n and names[2] in n for n in r.candidates.notes)
    tensors = [c.sources for c in r.candidates.candidates]
    assert len(tensors) == len(set(tensors))
    assert all(s.index != 3 for c in r.candidates.candidates for s in c.sources if s.kind == "chunk")
    assert not r.ambiguous, r.summary


@pytest.mark.fixture
def test_speculators_own_validation_counts_what_verify_reports(converted, tmp_path):
    """speculators' own validation (its dataset reader, collate, shift and Eagle3DraftModel forward, ttt step 0) on
    held-out samples scores what verify reports as speculators' figure; verify's out-of-vocabulary count is the scored
    labels outside t2d, and its top-1 counts those as misses."""
    from speculators.losses import resolve_loss_config
    from speculators.models.eagle3.core import Eagle3DraftModel
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset, CollateFn

    n = 32
    st.write_data(TARGET, tmp_path / "spec", n=n, seed=HELDOUT_SEED)
    config = Eagle3DraftModel.config_class.from_pretrained(st.OUT)
    config.transformer_layer_config._attn_implementation = "sdpa"
    config.speculators_config.verifier.name_or_path = str(TARGET)
    model = Eagle3DraftModel.from_pretrained(st.OUT, config=config).float().eval()
    data = ArrowDataset(max_len=4096, datapath=tmp_path / "spec", on_missing="raise", hidden_states_dtype=torch.float32)
    collate = CollateFn(4096, model.hidden_size, num_target_layers=3, dtype=torch.float32, preprocess=shift_batch)
    loss = resolve_loss_config("kl_div", "eager")
    correct = total = oov = 0
    in_vocab = model.t2d.bool()
    with torch.no_grad():
        for i in range(len(data)):
            batch = collate([data[i]])
            _, _, metrics = model(**batch, ttt_steps=1, ttt_step_loss_decay=1.0, loss_config=loss)
            correct += int(metrics["full_acc_0_sum"])
            total += int(metrics["full_acc_0_total"])
            ids, mask = batch["input_ids"][0], batch["loss_mask"][0].bool()  # after the shift: token t+1 at t
            oov += int((~in_vocab[ids[1:]] & mask[:-1]).sum())  # the label of a scored position is the next token

    lang = Language(**json.loads((st.FIXTURE / "fixture.json").read_text())["language"])
    n_layers = json.loads((TARGET / "config.json").read_text())["num_hidden_layers"]
    make_samples(TARGET, tmp_path / "legacy", n=n, seed=HELDOUT_SEED, lang=lang, layer_ids=list(range(-1, n_layers)))
    # the legacy layout, and speculators' own (its table's loss mask): the same positions, the same counts
    for data in (tmp_path / "legacy", tmp_path / "spec"):
        gap = verify(converted.dst, [data], target=TARGET, progress=False, max_combinations=0).vocabulary
        print(f"speculators: {correct}/{total}; verify on {data.name}: {gap.to_dict()}")
        assert gap.positions == total and gap.exact
        assert abs(gap.restricted_correct - correct) <= FLIPS
        assert gap.out_of_vocab == oov > 0
        assert gap.correct <= gap.positions - gap.out_of_vocab  # an out-of-vocabulary label is never a hit


def test_verify_without_the_target_bounds_speculators_figure(converted, tmp_path):
    lang = st.language()
    make_samples(TARGET, tmp_path / "s", n=8, seed=HELDOUT_SEED, lang=lang, layer_ids=list(range(-1, 7)))
    gap = verify(converted.dst, [tmp_path / "s"], progress=False, max_combinations=0).vocabulary
    assert not gap.exact and gap.speculators_top1 is None and "--target" in gap.why
    assert gap.speculators_top1_bound == pytest.approx(min(1.0, gap.top1 + gap.oov_fraction))
    assert gap.to_dict()["out_of_vocab"] == gap.out_of_vocab > 0


def test_verify_says_why_a_target_head_that_does_not_fit_gives_no_figure(converted, tmp_path):
    """A target lm_head too short for the draft's target ids (another checkpoint's): the bound, and the shape named,
    not an index error."""
    import shutil

    from safetensors.torch import save_file

    target = tmp_path / "target"
    shutil.copytree(TARGET, target)
    weights = load_file(str(target / "model.safetensors"))
    weights["lm_head.weight"] = weights["lm_head.weight"][:100].clone()
    save_file(weights, str(target / "model.safetensors"))
    make_samples(TARGET, tmp_path / "s", n=4, seed=HELDOUT_SEED, lang=st.language(), layer_ids=list(range(-1, 7)))
    gap = verify(converted.dst, [tmp_path / "s"], target=target, progress=False, max_combinations=0).vocabulary
    assert not gap.exact and "lm_head" in gap.why and "[100, 64]" in gap.why


def test_verify_refuses_a_d2t_past_the_target_vocabulary(converted, tmp_path):
    """A ``d2t`` that maps draft ids past the target vocabulary (offsets for another tokenizer, or ids written where
    offsets belong, verl-SpeCo PR#66) is refused naming the tensor, not counted as a vocabulary or a crash."""
    import shutil

    from safetensors.torch import save_file

    from sglang_eagle3_capture.core.errors import InputError

    bad = tmp_path / "bad"
    shutil.copytree(converted.dst, bad)
    weights = load_file(str(bad / "model.safetensors"))
    vocab = json.loads((TARGET / "config.json").read_text())["vocab_size"]
    weights["d2t"] = weights["d2t"] + vocab  # every draft id lands past the target vocabulary
    save_file(weights, str(bad / "model.safetensors"))
    make_samples(TARGET, tmp_path / "s", n=4, seed=HELDOUT_SEED, lang=st.language(), layer_ids=list(range(-1, 7)))
    with pytest.raises(InputError) as e:
        verify(bad, [tmp_path / "s"], progress=False, max_combinations=0)
    assert e.value.field == "d2t" and e.value.file == str(bad)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_rebuild_from_nothing_meets_the_criteria(tmp_path, build):
    """The builder from nothing (its own data, speculators' training on the CPU, the criteria); the committed result
    is what it writes: the same settings, and the same validation figure up to another machine's float rounding."""
    info = st.build(tmp_path / "out", work=tmp_path / "work")
    problems, measured = st.check(tmp_path / "out", tmp_path / "check")
    print(json.dumps({**info["seconds"], **measured}))
    assert problems == []
    assert info["train_command"] == build["train_command"] and info["data"] == build["data"]
    assert measured["speculators_full_acc_0"] == pytest.approx(build["criteria"]["speculators_full_acc_0"], abs=0.01)
