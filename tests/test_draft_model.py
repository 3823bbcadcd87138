"""The standalone draft head (sglang_eagle3_capture/draft_model.py) against SGLang's own
``LlamaForCausalLMEagle3``, plus its loader's errors and the EAGLE shift.

The SGLang side runs in a subprocess (this file's ``__main__``), because SGLang's process-wide
state allows one in-process ModelRunner per process (tests/sglang_inprocess.py) and other tests
build one for a target. There, SGLang's ModelRunner loads the draft dir with its own loader and
runs one extend batch; the aux hidden states are handed in as ``forward_batch.spec_info``, which
is exactly where SGLang's EAGLE-3 worker puts the target's packed aux states. The final hidden
states SGLang hands its LogitsProcessor are projected with SGLang's own ``lm_head`` weight.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from sglang_eagle3_capture.draft_model import DraftConfig, DraftFormatError, Eagle3Draft, eagle3_shift
from tolerances import TOLERANCES

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURE = REPO / "fixtures" / "tiny"

BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=16, intermediate_size=96,
            num_hidden_layers=1, vocab_size=256, draft_vocab_size=100, target_hidden_size=64,
            num_aux_hidden_states=3)
# Every branch of llama_eagle3.py's math that a config can switch on.
VARIANTS = {
    "plain": {},
    "all-options": dict(norm_before_fc=True, fc_norm=True, num_key_value_heads=2, target_hidden_size=48,
                        rope_theta=5000.0, rms_norm_eps=1e-5, fc_bias=True, attention_bias=True, num_hidden_layers=2),
    "tied": dict(tie_word_embeddings=True, draft_vocab_size=256),  # lm_head is embed_tokens
}


def random_draft(out: Path, seed: int = 0, **overrides) -> Path:
    """A seeded random draft dir in SGLang's format; norms and d2t are non-trivial so they matter."""
    cfg = DraftConfig(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = Eagle3Draft(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.uniform_(0.5, 1.5)
        hot = torch.randperm(cfg.vocab_size)[: cfg.draft_vocab_size].sort().values
        model.d2t.copy_(hot - torch.arange(cfg.draft_vocab_size))
    out.mkdir(parents=True, exist_ok=True)
    save_file(model.sglang_state_dict(), str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg.to_sglang_config(), indent=2))
    return out


def ragged_inputs(cfg: DraftConfig, lengths=(9, 5, 12), seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in lengths]
    aux = [torch.randn(n, cfg.fc_in_features, generator=gen) for n in lengths]
    return ids, aux


def padded(seqs, width):
    return torch.stack([torch.nn.functional.pad(s, [0, 0] * (s.dim() - 1) + [0, width - len(s)]) for s in seqs])


def mine_per_token(model: Eagle3Draft, ids, aux) -> torch.Tensor:
    """Our logits for ragged sequences, run as one right-padded batch, flattened to SGLang's [T, V]."""
    width = max(len(i) for i in ids)
    with torch.no_grad():
        logits = model(padded(ids, width), padded(aux, width))
    return torch.cat([logits[b, : len(i)] for b, i in enumerate(ids)])


def run_sglang(draft_dir: Path, ids, aux, tmp_path: Path) -> dict:
    """SGLang's LlamaForCausalLMEagle3 on the same inputs, in a subprocess (see module docstring)."""
    from sglang_cpu_patches import cpu_env

    io = tmp_path / "io.pt"
    torch.save({"ids": [i.tolist() for i in ids], "aux": torch.cat(aux)}, io)
    proc = subprocess.run([sys.executable, __file__, str(draft_dir), str(io)], env=cpu_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(tmp_path / "io.out.pt")


def check_against_sglang(draft_dir: Path, ids, aux, tmp_path: Path, target_embed=None):
    ours = Eagle3Draft.from_pretrained(draft_dir, target_embed=target_embed)
    got = run_sglang(draft_dir, ids, aux, tmp_path)
    mine = mine_per_token(ours, ids, aux)
    assert got["logits"].shape == mine.shape
    torch.testing.assert_close(mine, got["logits"], **TOLERANCES[torch.float32])
    # SGLang's own greedy pick at each prompt's last token (draft ids), and its hot-token map (= d2t).
    assert mine[torch.tensor([len(i) for i in ids]).cumsum(0) - 1].argmax(-1).tolist() == got["next_token_ids"]
    assert torch.equal(ours.to_target_ids(torch.arange(ours.config.draft_vocab_size)), got["hot_token_id"])
    # The comparison can fail: permuting the fc chunks moves the logits far outside the tolerance.
    k = ours.config.num_aux_hidden_states
    swapped = [torch.cat(a.chunk(k, dim=-1)[::-1], dim=-1) for a in aux]
    assert (mine_per_token(ours, ids, swapped) - got["logits"]).abs().max() > 1e3 * TOLERANCES[torch.float32]["atol"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_matches_sglang_llama_eagle3(tmp_path, variant):
    draft_dir = random_draft(tmp_path / "draft", **VARIANTS[variant])
    cfg = DraftConfig.from_dict(json.loads((draft_dir / "config.json").read_text()))
    assert cfg == DraftConfig(**{**BASE, **VARIANTS[variant]})  # to_sglang_config round-trips
    check_against_sglang(draft_dir, *ragged_inputs(cfg), tmp_path)


def test_fixture_draft_matches_sglang_on_training_samples(tmp_path):
    """The committed fixture draft on its own legacy-layout samples, embedding from the target as served."""
    from safetensors.torch import load_file

    files = sorted((FIXTURE / "samples").glob("data_*.pt"))[:4]
    samples = [torch.load(f) for f in files]
    embed = load_file(str(FIXTURE / "target" / "model.safetensors"))["model.embed_tokens.weight"]
    ids, aux = [], []
    for s in samples:
        i, a, _, _ = eagle3_shift(s["input_ids"], torch.cat(s["hidden_states"][:3], -1), s["input_ids"], s["loss_mask"])
        ids.append(i)
        aux.append(a)
    check_against_sglang(FIXTURE / "draft", ids, aux, tmp_path, target_embed=embed)


def test_save_load_roundtrip_and_padding(tmp_path):
    draft_dir = random_draft(tmp_path / "d", **VARIANTS["all-options"])
    a = Eagle3Draft.from_pretrained(draft_dir)
    state = {k: v for k, v in a.sglang_state_dict().items() if k != "t2d"}
    save_file(state, str(tmp_path / "d" / "model.safetensors"))
    b = Eagle3Draft.from_pretrained(draft_dir)
    ids, aux = ragged_inputs(a.config)
    assert torch.equal(mine_per_token(a, ids, aux), mine_per_token(b, ids, aux))
    with torch.no_grad():  # right padding is exact: each sequence alone gives the same logits
        alone = torch.cat([a(i[None], x[None])[0] for i, x in zip(ids, aux)])
    torch.testing.assert_close(mine_per_token(a, ids, aux), alone, **TOLERANCES[torch.float32])


def test_target_embedding_replaces_the_drafts_own(tmp_path):
    draft_dir = random_draft(tmp_path / "d")
    embed = torch.randn(256, 64)
    model = Eagle3Draft.from_pretrained(draft_dir, target_embed=embed)
    assert model.embedding_source == "target" and torch.equal(model.embed_tokens.weight, embed)
    assert Eagle3Draft.from_pretrained(draft_dir).embedding_source == "draft"


def test_eagle3_shift_is_speculators_shift_batch():
    ids, aux = torch.arange(6), torch.arange(12.0).view(6, 2)
    tgt, mask = torch.arange(10, 16), torch.tensor([0, 0, 1, 1, 1, 0])
    i, a, t, m = eagle3_shift(ids, aux, tgt, mask)
    assert torch.equal(i, ids[1:]) and torch.equal(a, aux[:-1]) and torch.equal(t, tgt[1:])
    assert torch.equal(m, mask[1:].bool())


@pytest.mark.parametrize("breakage, message", [
    (lambda c, w: c.pop("hidden_size"), "field 'hidden_size' is missing"),
    (lambda c, w: c.update(architectures=["Eagle3Speculator"]), "field 'architectures'"),
    (lambda c, w: c.update(rope_parameters={"rope_type": "llama3", "rope_theta": 1e4}), "field 'rope_parameters'"),
    (lambda c, w: w.pop("d2t"), "no 'd2t' tensor"),
    (lambda c, w: w.pop("fc.weight"), "['fc.weight'] are missing"),
    (lambda c, w: w.update({"fc.weight": torch.zeros(64, 10)}), "weight 'fc.weight' has shape (64, 10)"),
    (lambda c, w: c.pop("draft_vocab_size"), "pass the target's lm_head weight"),
    (lambda c, w: c.update(target_hidden_size=None), "field 'target_hidden_size' is null"),
])
def test_bad_draft_dirs_name_file_and_field(tmp_path, breakage, message):
    from safetensors.torch import load_file

    d = random_draft(tmp_path / "d")
    cfg, weights = json.loads((d / "config.json").read_text()), load_file(str(d / "model.safetensors"))
    breakage(cfg, weights)
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(weights, str(d / "model.safetensors"))
    with pytest.raises(DraftFormatError) as err:
        Eagle3Draft.from_pretrained(d)
    assert message in str(err.value) and str(d) in str(err.value)


def test_weights_sglang_ignores_are_reported(tmp_path):
    from safetensors.torch import load_file

    d = random_draft(tmp_path / "d")
    weights = load_file(str(d / "model.safetensors"))
    weights["verifier_lm_head.weight"] = torch.zeros(3)
    save_file(weights, str(d / "model.safetensors"))
    with pytest.warns(UserWarning, match="verifier_lm_head.weight"):
        model = Eagle3Draft.from_pretrained(d)
    assert model.ignored_weights == ["verifier_lm_head.weight"]


def _sglang_side(draft_dir: str, io_path: str) -> None:
    """Subprocess body: SGLang's ModelRunner on the draft dir, one extend batch, outputs saved."""
    import types

    import conftest  # noqa: F401  (stub sgl_kernel first on sys.path, CPU env, B1-B3 hook)
    import sglang.srt.models.llama_eagle3 as llama_eagle3
    from sglang_inprocess import get_runner

    io = torch.load(io_path)
    original = llama_eagle3.LlamaModel.forward

    def forward(self, input_ids, positions, forward_batch, input_embeds=None, pp_proxy_tensors=None):
        # Where the EAGLE-3 worker puts the target's packed aux hidden states ([T, K*H], token order).
        forward_batch.spec_info = types.SimpleNamespace(hidden_states=io["aux"])
        return original(self, input_ids, positions, forward_batch, input_embeds, pp_proxy_tensors)

    llama_eagle3.LlamaModel.forward = forward
    runner = get_runner(draft_dir)
    assert type(runner.model).__name__ == "LlamaForCausalLMEagle3"
    out = runner.prefill(io["ids"])
    vocab = runner.model.config.draft_vocab_size  # ParallelLMHead pads its rows
    logits = torch.nn.functional.linear(out.hidden, runner.model.lm_head.weight[:vocab])
    torch.save({"logits": logits, "next_token_ids": out.next_token_ids, "hot_token_id": runner.model.hot_token_id},
               io_path.replace("io.pt", "io.out.pt"))


if __name__ == "__main__":
    _sglang_side(*sys.argv[1:])
