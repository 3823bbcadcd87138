"""The draft's own rollouts (sglang_eagle3_capture.doctor.rollout): a hand-built top-k tree whose answer is derived
by hand below, the served walk, and the training code's recorded offline chain accuracy reproduced (the tree against
SGLang's own functions: tests/inprocess/test_rollout_sglang.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from sglang_eagle3_capture.doctor import rollout
from sglang_eagle3_capture.doctor.expected import Setting, _walk
from support import rollout_fake
from support.rollout_fake import ROOT_TOKEN

fake = rollout_fake.fake  # the stand-in draft (a fixture)

# The hand-built case (V = 4; token 3 never proposed). Step 0 (from the root): 0 (.5), 1 (.3).
# Step 1, slot-major: 0 -> 2 (.5 * .7 = .35), 0 -> 0 (.5 * .2 = .10); 1 -> 0 (.3 * .6 = .18), 1 -> 1 (.3 * .3 = .09);
# kept for step 2: 0->2 (.35, slot 0) and 1->0 (.18, slot 1).
# Step 2: 0->2->0 (.35 * .5 = .175), 0->2->1 (.35 * .4 = .14); 1->0->2 (.18 * .7 = .126), 1->0->0 (.18 * .2 = .036).
# Scores in candidate order: [.5, .3 | .35, .10, .18, .09 | .175, .14, .126, .036].
TABLE = [[0.2, 0.1, 0.7, 0.0], [0.6, 0.3, 0.1, 0.0], [0.5, 0.4, 0.1, 0.0], [0.5, 0.3, 0.2, 0.0]]
HAND = [
    # (target greedy tokens, setting, accepted draft tokens, why)
    ([0, 2, 0], Setting(2, 2, 3), 2, "the 2 best: .5 (0), .35 (0->2)"),
    ([1, 0, 2], Setting(2, 2, 3), 0, "node 1 (.3) is not among the 2 best"),
    ([1, 0, 2], Setting(2, 2, 4), 1, "3 best add .3 (1); 1->0 (.18) is not in"),
    ([1, 0, 2], Setting(2, 2, 5), 2, "4 best add .18 (1->0)"),
    ([0, 2, 0], Setting(3, 2, 6), 3, "5 best: .5 .35 .3 .18 .175 (0->2->0)"),
    ([1, 0, 2], Setting(3, 2, 6), 2, "1->0->2 (.126) is not among the 5 best"),
    ([1, 0, 2], Setting(3, 2, 8), 3, "7 best reach .126"),
    ([0, 0, 2], Setting(3, 2, 8), 1, "0->0 (.10) is not among the 7 best"),
    ([0, 2, 0], Setting(3, 1, 4), 3, "the chain: argmax 0, 2, 0"),
    ([0, 2, 1], Setting(3, 1, 4), 2, "the chain's third proposal is 0"),
]


@pytest.mark.parametrize("target, setting, want, why", HAND)
def test_hand_built_tree(fake, target, setting, want, why):
    draft = fake(TABLE)
    ids = torch.tensor([[ROOT_TOKEN, 0, 0, 0]])  # rows 1.. read other tokens; only row 0 is a start below
    tgt = torch.tensor([target + [0]])
    mask = torch.tensor([[True, True, True, True]])
    acc = rollout.accepted_drafts(draft, ids, torch.zeros(1, 4, 1), tgt, mask, [setting])[setting]
    assert int(acc[0, 0]) == want, why


def test_a_chain_stops_at_the_first_unscored_row(fake):
    draft = fake(TABLE)
    ids = torch.tensor([[ROOT_TOKEN, 0, 0, 0]])
    tgt = torch.tensor([[0, 2, 0, 0]])
    s = Setting(3, 1, 4)
    acc = rollout.accepted_drafts(draft, ids, torch.zeros(1, 4, 1), tgt, torch.tensor([[True, True, False, True]]),
                                  [s])[s]
    assert int(acc[0, 0]) == 2  # the third proposal would be right, but row 2 is not scored (end of the response)
    assert int(acc[0, 2]) == -1  # not a start


def test_walk_jumps_by_the_accepted_tokens_plus_the_bonus():
    acc = torch.tensor([[-1, 2, 0, 0, 1, 0, 3, -1], [0, 0, -1, -1, -1, -1, -1, -1]])
    assert _walk(acc) == [2, 1, 3, 0, 0]  # row 1 -> 4 -> 6 -> 10 (past the starts); row 0 -> 1 -> 2 (not a start)


@pytest.mark.fixture
def test_package_rollout_reproduces_the_training_codes_recorded_chain_accuracy():
    """fixtures/tiny-llama/draft-ttt/build.json's offline chain accuracy (the training code's own rollouts at build
    time) from the held-out split, by the package's rollout, exactly (4 decimals as recorded)."""
    from fixtures.draft_train import aux_of
    from fixtures.language import Language
    from fixtures.samples import load_target, make_batch
    from fixtures.specs import SPECS
    from sglang_eagle3_capture.doctor.model import Eagle3Draft, eagle3_shift

    fixture = SPECS["tiny-llama"].directory
    build = json.loads((fixture / "draft-ttt" / "build.json").read_text())
    info = json.loads((fixture / "fixture.json").read_text())
    target = load_target(fixture / "target")
    heldout = make_batch(target, Language(**info["language"]), build["heldout"]["n"], build["heldout"]["seed"])
    embed = target.model.embed_tokens.weight.detach()
    for name, d in (("this_draft", "draft-ttt"), ("this_draft_sglang_default", "draft-ttt"),
                    ("fixture_draft", "draft")):
        recorded = build["offline_chain_accuracy"][name]
        draft = Eagle3Draft.from_pretrained(fixture / d, target_embed=embed)
        ids, aux, tgt, mask = eagle3_shift(heldout["ids"], aux_of(heldout["states"], recorded["layer_ids"]),
                                           heldout["target_ids"], heldout["loss_mask"])
        s = Setting(recorded["steps"], 1, recorded["steps"] + 1)
        acc = rollout.accepted_drafts(draft, ids, aux, tgt, mask, [s])[s]
        assert int((acc >= 0).sum()) == recorded["chain_starts"]
        got = [round(p, 4) for p in rollout.per_position(acc, s.steps)]
        assert got == recorded["prefix"], name
        assert math.isclose(round(1 + sum((acc[acc >= 0] >= k + 1).float().mean().item() for k in range(s.steps)),
                                  4), recorded["offline_accept_length"], abs_tol=1e-4)
