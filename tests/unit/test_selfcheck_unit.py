"""core/selfcheck.py and core/sglang/selfcheck.py without SGLang: the gating, references, bound, row alignment and
error text on the torch-only DeepSeek-shaped stand-in (benchmarks/selfcheck_standin.py, which runs the package's
real CapturePlan and FcFeed)."""

import dataclasses
import sys
from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core import selfcheck as check_core
from sglang_eagle3_capture.core.errors import DeploymentError
from sglang_eagle3_capture.core.sglang import selfcheck
from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import selfcheck_standin as si  # noqa: E402

ROUTES = releases.newest().selfcheck_routes
IDS = (3, -1, 6, 0)  # permuted; the embedding; the last layer (N-1 = 6, final norm); layer 0


@pytest.fixture(autouse=True)
def _clean():
    selfcheck.disarm()
    yield
    selfcheck.disarm()


def _run(stack, ids=None, mode="EXTEND"):
    ids = torch.arange(3, 13) if ids is None else ids
    with torch.no_grad():
        return si.Runner(stack).forward(si.batch(ids, mode))


def _hooks(module):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("fused", [False, True], ids=["module-norms", "fused-allreduce-norms"])
def test_a_correct_capture_passes_bit_exact(dtype, fused, caplog):
    stack = si.build(dtype=dtype, fused=fused)
    base = _hooks(stack)
    si.arm(stack)
    with caplog.at_level("INFO", logger=check_core.__name__):
        _run(stack)
    assert selfcheck.pending() == ()
    (line,) = [r.getMessage() for r in caplog.records if "self-check passed" in r.getMessage()]
    assert line.count("max|diff| 0 (") == len(IDS)  # every chunk bit-equal, 0 ulp
    route = "residual out of layers[4].input_layernorm.forward_with_allreduce_fusion" if fused else \
        "operands of layers[4].input_layernorm"
    assert f"chunk 0 layer 3: max|diff| 0 ({route})" in line
    assert _hooks(stack) == base and "forward_with_allreduce_fusion" not in vars(stack.layers[4].input_layernorm)


def test_routes_come_from_the_table_and_a_missing_reference_fails_closed():
    stack = si.build(fused=True)
    check = si.arm(stack)
    check.routes = (check_core.NORM_OPERANDS,)
    with pytest.raises(DeploymentError, match=r"fc chunk 0 \(layer id 3\): no reference for the output of decoder "
                                             r"layer 3 was taken in this forward: none of the routes "
                                             r"\['norm-operands'\] fired at layers\[4\]"):
        _run(stack)
    check.routes = (check_core.RESIDUAL_STREAM,)
    _run(stack)  # the residual stream at layers[4].self_attn: bit-equal as well
    assert selfcheck.pending() == ()


def _permute(stack):
    feed = stack._eagle3_capture_feed
    order = list(feed.plan.chunk_order)
    order[0], order[1] = order[1], order[0]
    feed.plan = dataclasses.replace(feed.plan, chunk_order=tuple(order))


def _shift(stack):
    stack.layers_to_capture[:] = [i + 1 for i in stack.layers_to_capture]


class _Alter:
    def __init__(self, feed, alter):
        self.feed, self.alter = feed, alter

    def __call__(self, *args):
        hidden, fc = self.feed(*args)
        return hidden, self.alter(fc)


def _wrap(alter):
    def go(stack):
        stack._eagle3_capture_feed = _Alter(stack._eagle3_capture_feed, alter)
    return go


STALE = {}
SABOTAGE = {
    "permuted": (_permute, r"fc chunk 0 \(layer id 3\) is not the output of decoder layer 3: max \|diff\| [0-9.]+ "
                           r"\([0-9.e+]+ ulp; allowed 1 ulp\) against operands of layers\[4\]\.input_layernorm; it is "
                           r"layer id -1's hidden state instead"),
    "shifted": (_shift, r"fc chunk 1 \(layer id -1\) is not the embedding output"),
    "partial": (_wrap(lambda fc: torch.cat([fc[:4], torch.zeros_like(fc[4:])])), r"is not the output of decoder"),
    "rows-dropped": (_wrap(lambda fc: fc[:4]), r"4 rows, but .* has 10 and its rows are not among the chunk's"),
    "stale": (_wrap(lambda fc: STALE["fc"]), r"fc chunk 1 \(layer id -1\) is not the embedding output"),
    "no-aux": (_wrap(lambda fc: None), r"handed the draft no aux hidden states"),
}


@pytest.mark.parametrize("kind", sorted(SABOTAGE))
def test_a_sabotaged_capture_is_refused(kind):
    stack = si.build()
    STALE["fc"] = _run(stack, torch.arange(20, 30))[1].clone()  # an earlier batch's fc input, same shape
    check = si.arm(stack)
    sabotage, message = SABOTAGE[kind]
    sabotage(stack)
    base = _hooks(stack)
    with pytest.raises(DeploymentError, match=message) as e:
        _run(stack)
    text = e.value.problem
    assert e.value.file == "stand-in manifest" and e.value.field is None and e.value.fix
    assert text.startswith("eagle3-capture self-check FAILED on the first extend batch (tp_rank ")
    assert "pid " in text and "sglang " in text and "layer ids [3, -1, 6, 0]" in text
    assert "SGLANG_EAGLE3_CAPTURE_SELFCHECK=0 skips the check" in text
    assert _hooks(stack) == base  # removed on failure too
    assert check in selfcheck.pending()  # a process that failed keeps refusing


@pytest.mark.parametrize("mode", ["DECODE", "IDLE", "TARGET_VERIFY", "DRAFT_EXTEND_V2", "SPLIT_PREFILL",
                                  "PREBUILT", "DLLM_EXTEND"])
def test_other_batches_are_skipped_until_an_extend(mode):
    stack = si.build()
    check = si.arm(stack)
    _run(stack, mode=mode)
    _run(stack, ids=torch.zeros(0, dtype=torch.long))  # an idle DP-attention batch: no tokens
    assert check in selfcheck.pending()
    _run(stack, mode="MIXED")
    assert selfcheck.pending() == ()


def test_a_forward_that_does_not_reach_the_stack_leaves_it_pending():
    stack, other = si.build(), si.build(seed=1)
    check = si.arm(stack)
    _run(other)  # another model's forward (e.g. the draft's runner): the stack's hooks never fire
    assert check in selfcheck.pending()


def test_after_the_check_the_forward_runs_the_same_ops():
    stack = si.build(dtype=torch.bfloat16)
    with si.AtenOps() as before:
        a = _run(stack)
    si.arm(stack)
    with si.AtenOps() as during:
        b = _run(stack)
    with si.AtenOps() as after:
        c = _run(stack)
    assert after.ops == before.ops and len(during.ops) > len(before.ops)
    assert torch.equal(a[1], b[1]) and torch.equal(a[1], c[1])


def test_the_bound():
    """0 ulp on exact routes, at most one ulp on operand sums; a neighbouring value of any size beyond fails."""
    want = torch.tensor([[1.0, 2.0, -3.0]], dtype=torch.bfloat16)
    ulp = torch.tensor([[1.0, 2.0, 2.0]]) * torch.finfo(torch.bfloat16).eps
    one_ulp, two_ulp = (want.float() + ulp).to(torch.bfloat16), (want.float() + 2 * ulp).to(torch.bfloat16)
    assert check_core.difference(want, want) == (0.0, 0.0)
    assert check_core.difference(one_ulp, want)[1] == 1.0 and check_core.difference(two_ulp, want)[1] == 2.0
    session = selfcheck.Session.__new__(selfcheck.Session)
    session.check = SimpleNamespace(attn_tp=lambda: (0, 1), layer_ids=(0, -1), family=si.FAMILY, routes=ROUTES,
                                    num_hidden_layers=2, stack_name="Stack")
    session.lines = []
    session.refs = {0: check_core.Ref(want, "operands", 1, exact=False), -1: check_core.Ref(want, "lookup", 1, True)}
    assert session.compare(torch.cat([one_ulp, want], dim=-1)) == []
    problems = session.compare(torch.cat([want, one_ulp], dim=-1))
    assert len(problems) == 1 and "allowed none" in problems[0]
    assert "allowed 1 ulp" in session.compare(torch.cat([two_ulp, want], dim=-1))[0]


def test_the_operand_sum_rounds_as_sglang_rmsnorm():
    x = torch.randn(4, 8).to(torch.bfloat16)
    r = torch.randn(4, 8).to(torch.bfloat16)
    plain = SimpleNamespace()
    assert torch.equal(check_core._rounded_sum(plain, x, r, None, 4), (x.float() + r.float()).to(torch.bfloat16))
    assert check_core._rounded_sum(SimpleNamespace(fp32_residual=True), x, r, None, 4).dtype == torch.float32
    half = SimpleNamespace(override_orig_dtype=torch.float16)
    assert check_core._rounded_sum(half, x, r, None, 4).dtype == torch.float16
    post = torch.ones(4, 8, dtype=torch.bfloat16)
    assert torch.equal(check_core._rounded_sum(plain, x, r, post, 2),
                       (x[:2].float() + r[:2].float() + 1).to(torch.bfloat16))


def test_row_alignment():
    chunk = torch.arange(24.0).reshape(8, 3)
    ref = check_core.Ref(chunk[4:8].clone(), "r", 4, exact=True)  # rank 1 of 2: its attention-TP slice
    got, want = check_core.align_rows(chunk, ref, attn_tp=(1, 2))
    assert torch.equal(got, want)
    ref = check_core.Ref(chunk[[6, 1]].clone(), "r", 2, exact=True)  # context parallel: rows found by their bits
    got, want = check_core.align_rows(chunk, ref, attn_tp=(0, 1))
    assert torch.equal(got, want)
    ref = check_core.Ref(torch.full((2, 3), -1.0), "r", 2, exact=True)
    assert check_core.align_rows(chunk, ref, attn_tp=(0, 1)) == (None, None)


def test_row_alignment_by_value_allows_what_the_comparison_allows():
    """Gathered / context-parallel rows: an operand-sum reference (fp32, or 1 ulp off) is found among the chunk's rows
    with the comparison's tolerance, after casting to the chunk's dtype; an exact one still needs every bit."""
    chunk = (torch.arange(24.0).reshape(8, 3) + 1).to(torch.bfloat16)
    picked = chunk[[6, 1]]
    ulp = check_core._ulp(picked)
    one_off = (picked.float() + ulp).to(torch.bfloat16)  # one bf16 ulp above each element
    two_off = (picked.float() + 2 * ulp).to(torch.bfloat16)
    in_fp32 = picked.float() + 0.25 * ulp  # the fp32 sum, rounding to the chunk's value
    for want in (one_off, in_fp32, one_off.float()):
        ref = check_core.Ref(want.clone(), "operands", 2, exact=False)
        got, _ = check_core.align_rows(chunk, ref, attn_tp=(0, 1))
        assert got is not None and torch.equal(got, picked)
    ref = check_core.Ref(picked.float(), "lookup", 2, exact=True)  # exact, other dtype: bit-equal once cast
    assert torch.equal(check_core.align_rows(chunk, ref, attn_tp=(0, 1))[0], picked)
    assert check_core.align_rows(chunk, check_core.Ref(one_off, "lookup", 2, exact=True),
                                 attn_tp=(0, 1)) == (None, None)
    assert check_core.align_rows(chunk, check_core.Ref(two_off, "operands", 2, exact=False),
                                 attn_tp=(0, 1)) == (None, None)


def test_a_one_ulp_operand_sum_on_a_gathered_layout_passes_the_comparison():
    chunk = (torch.arange(24.0).reshape(8, 3) + 1).to(torch.bfloat16)
    want = (chunk[[5, 2]].float() + check_core._ulp(chunk[[5, 2]])).to(torch.bfloat16)
    session = selfcheck.Session.__new__(selfcheck.Session)
    session.check = SimpleNamespace(attn_tp=lambda: (0, 1), layer_ids=(0,), family=si.FAMILY, routes=ROUTES,
                                    num_hidden_layers=2, stack_name="Stack")
    session.lines = []
    session.refs = {0: check_core.Ref(want, "operands", 2, exact=False)}
    assert session.compare(chunk) == []  # was: "a partial capture", refusing startup


def test_embedding_reference_on_a_vocabulary_shard():
    """At TP > 1 the embedding weight is a shard: rows whose id another rank owns are that rank's to check."""
    stack = si.build()
    emb = stack.embed_tokens
    emb.tp_size = 2
    emb.shard_indices = SimpleNamespace(org_vocab_start_index=0, org_vocab_end_index=8)
    si.arm(stack)
    _run(stack, ids=torch.tensor([3, 5, 9, 200, 7]))  # ids 3, 5, 7 are this shard's: compared bit for bit
    assert selfcheck.pending() == ()


def test_switch():
    assert selfcheck.enabled({}) and selfcheck.enabled({selfcheck.ENV: "1"})
    assert not any(selfcheck.enabled({selfcheck.ENV: v}) for v in ("0", "false", "OFF", " no "))
    assert selfcheck.is_real_extend(si.batch(torch.arange(3), "MIXED"))
    assert not selfcheck.is_real_extend(si.batch(torch.arange(0), "EXTEND"))


def test_the_embedding_reference_reads_the_embeddings_parameter_the_family_table_names():
    """Qwen3-Next's decoder stack takes ``inputs_embeds`` (qwen3_next.py:964-971), every other stack ``input_embeds``:
    the layer id -1 reference is read from the parameter the family table names (a table entry naming one the forward
    does not have is refused when the table is built)."""
    params = ("self", "input_ids", "positions", "forward_batch", "inputs_embeds")
    with pytest.raises(ValueError, match="embeds_param"):
        dataclasses.replace(si.FAMILY, name="next-like", forward_params=params)
    family = dataclasses.replace(si.FAMILY, name="next-like", forward_params=params, embeds_param="inputs_embeds")
    session = selfcheck.Session.__new__(selfcheck.Session)
    session.check = SimpleNamespace(attn_tp=lambda: (0, 1), layer_ids=(-1,), family=family, routes=ROUTES)
    session.refs, session.own_s = {}, 0.0
    embeds = torch.randn(4, 8)
    session._take_inputs(None, (None, None, None), {"inputs_embeds": embeds})
    assert torch.equal(session.refs[-1].value, embeds) and session.refs[-1].exact
    session.refs = {}
    session._take_inputs(None, (None, None, None, embeds + 1), {})  # positional, as Qwen3NextForCausalLM passes it
    assert torch.equal(session.refs[-1].value, embeds + 1)
