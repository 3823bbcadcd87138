"""The top-k tree of sglang_eagle3_capture.doctor.rollout against SGLang's own tree construction, run on CPU
(speculative/spec_utils.py ``_select_top_k_tokens_first/_later`` eagerly, eagle_utils.py ``organize_draft_results``),
and every setting ``plan`` proposes resolved by the installed SGLang's own argument parser: none is rewritten."""

from __future__ import annotations

import pytest
import torch

from fixtures.specs import SPECS
from sglang_eagle3_capture.doctor import rollout
from sglang_eagle3_capture.doctor.expected import DEFAULT_SETTINGS, Setting, runs_as_asked
from sglang_eagle3_capture.doctor.setup_args import resolve
from support import rollout_fake
from support.rollout_fake import ROOT_TOKEN

fake = rollout_fake.fake  # the stand-in draft (a fixture)

TINY = SPECS["tiny"].directory
CPU = ["--device", "cpu", "--attention-backend", "torch_native", "--skip-tokenizer-init"]


def _sglang_tree(table, steps, topk, draft_tokens, b):
    """The tree SGLang builds for ``b`` requests whose draft has ``table``'s next-token distributions, by its own
    functions, driven as speculative/eagle_worker_v2.py ``draft_forward`` drives them."""
    spec_utils = pytest.importorskip("sglang.srt.speculative.spec_utils")
    eagle_utils = pytest.importorskip("sglang.srt.speculative.eagle_utils")

    def plain(f):
        return getattr(f, "_torchdynamo_orig_callable", f)  # the torch.compile'd helper, run eagerly

    first, later = plain(spec_utils._select_top_k_tokens_first), plain(spec_utils._select_top_k_tokens_later)
    probs = table[torch.full((b,), ROOT_TOKEN)]
    topk_p, topk_index = torch.topk(probs, topk, dim=-1)
    hidden = torch.zeros(b, 1)
    scores, score_list, token_list, parents_list = None, [], [], []
    for i in range(steps):
        if i == 0:
            input_ids, hidden, scores, info = first(topk_p, topk_index, hidden, topk)
        else:
            input_ids, hidden, scores, info = later(i, topk_p, topk_index, hidden, scores, topk)
        score_list.append(info[0])
        token_list.append(info[1])
        parents_list.append(info[2])
        if i == steps - 1:
            break
        topk_p, topk_index = torch.topk(table[input_ids], topk, dim=-1)
    _, index, tokens = eagle_utils.organize_draft_results(score_list, token_list, parents_list, draft_tokens)
    return index, tokens


@pytest.mark.parametrize("steps, topk, draft_tokens", [(2, 2, 4), (3, 2, 6), (3, 3, 8), (4, 2, 8), (3, 4, 16)])
def test_tree_selection_equals_sglangs(fake, steps, topk, draft_tokens):
    """Random next-token distributions over 8 tokens: the candidates this package selects are SGLang's, by index
    and token. Each row of a batch is one request whose root distribution is the same, so every row agrees."""
    g = torch.Generator().manual_seed(steps * 100 + topk * 10 + draft_tokens)
    table = torch.softmax(torch.randn(9, 9, generator=g) * 2, dim=-1)
    table[:, ROOT_TOKEN] = 0.0  # never proposed: every path's tokens index the table
    table = table / table.sum(-1, keepdim=True)
    draft = fake(table)
    s = Setting(steps, topk, draft_tokens)
    ids = torch.full((1, 2), ROOT_TOKEN)
    cands = rollout.tree_candidates(draft, ids, torch.zeros(1, 2, 1), torch.zeros(1, 2, dtype=torch.long),
                                    torch.ones(1, 2, dtype=torch.bool), steps, topk)
    sel, tokens, _, _ = rollout.selected(cands, s)
    want_index, want_tokens = _sglang_tree(table, steps, topk, draft_tokens, b=1)
    assert sel[0, 0].tolist() == want_index[0].tolist()
    assert tokens[0, 0].tolist() == want_tokens[0].tolist()


def _effective(s: Setting) -> tuple[int, int, int]:
    """What SGLang runs for ``s``: its resolved values (the resolving view where the release declares them)."""
    sa = resolve(["--speculative-algorithm", "EAGLE3", *s.flags().split(), *CPU], str(TINY / "draft"),
                 str(TINY / "target")).server_args
    try:
        from sglang.srt.arg_groups.overrides import resolving_view

        sa = resolving_view(sa)
    except ImportError:  # a release without declared resolutions assigns the fields
        pass
    return sa.speculative_num_steps, sa.speculative_eagle_topk, sa.speculative_num_draft_tokens


@pytest.mark.parametrize("s", DEFAULT_SETTINGS, ids=lambda s: s.label())
def test_sglang_runs_every_proposed_setting_as_asked(s):
    assert _effective(s) == (s.steps, s.topk, s.draft_tokens)


def test_the_rewritten_setting_is_what_runs_as_asked_refuses():
    s = Setting(1, 1, 4)  # the case behind the product
    assert _effective(s) == (1, 1, 2) and runs_as_asked(s) is not None
