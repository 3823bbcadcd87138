"""The first-batch self-check (core/sglang/selfcheck.py) on SGLang's own DeepSeek-V3 in this process (the ``runner``
fixture): a pass, each sabotage kind refused with the message, idle/decode batches skipped, hooks and the transient
patch gone afterwards, and the forward after the check running exactly the ops of a forward without it.

Sabotage is applied the way a test-only hook would in a server: after the capture patch configured the model, by
replacing what the feed hands on (never through a switch in the package).
"""

import functools
import sys
from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core import releases, seams
from sglang_eagle3_capture.core import selfcheck as check_core
from sglang_eagle3_capture.core.errors import DeploymentError
from sglang_eagle3_capture.core.sglang import selfcheck
from sglang_eagle3_capture.core.sglang import target as target_patch
from sglang_eagle3_capture.core.sglang.resolution import DeclaredLayerIds
from support import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from selfcheck_standin import AtenOps  # noqa: E402  (the GPU check's recorder: one copy)

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [100, 3, 200, 45, 17]]
IDS = [5, -1, 1]  # the last layer first (final norm), the embedding, layer 1: a permuting feed
WHERE = "test eagle3_manifest.json: field 'layer_ids'"


def _hooks(module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())


@pytest.fixture
def configure(runner):
    """``configure(ids)`` configures the capture as the patched resolution does and returns the check it armed."""
    with target_patch.patched():
        def go(ids):
            runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds(ids, WHERE))
            (check,) = [c for c in selfcheck.pending() if c.stack_ref() is runner.model.model]
            return check

        yield go
    assert selfcheck.pending() == () and not selfcheck.gate_applied()  # revert() disarms
    runner.reset_capture()


class Sabotage:
    """Stands in for the stack's feed after configuration and alters what it hands the draft."""

    def __init__(self, feed, alter):
        self.feed, self.alter = feed, alter

    def __call__(self, model, out, *rest):
        hidden, fc = self.feed(model, out, *rest)
        return hidden, self.alter(fc)

    def __getattr__(self, name):
        return getattr(self.feed, name)


def _sabotage(runner, alter):
    stack = runner.model.model
    stack._eagle3_capture_feed = Sabotage(stack._eagle3_capture_feed, alter)


def _swap(fc, h=64):
    a, b, c = fc.split(h, dim=-1)
    return torch.cat([b, a, c], dim=-1)


def test_pass_logs_one_line_removes_hooks_and_restores_sglang(runner, configure, caplog):
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.models.deepseek_v2 import DeepseekV2Model

    sglang_forward = ModelRunner.__dict__["forward"]
    check = configure(IDS)
    base_hooks = _hooks(runner.model)  # the feed's final-norm hook (layer id 5)
    capture_forward = DeepseekV2Model.__dict__["forward"]
    assert check is not None and selfcheck.gate_applied()
    assert ModelRunner.__dict__["forward"] is not sglang_forward
    with caplog.at_level("INFO", logger=check_core.__name__):  # the pass line is the engine-neutral check's
        runner.prefill(PROMPTS)
    lines = [r.getMessage() for r in caplog.records if "self-check passed" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "14 tokens" in lines[0] and "chunk 0 layer 5: max|diff| 0" in lines[0]
    assert "chunk 1 layer -1: max|diff| 0 (embedding lookup" in lines[0]
    assert "operands of layers[2].input_layernorm" in lines[0] and "sglang " in lines[0]
    assert selfcheck.pending() == () and not selfcheck.gate_applied()
    assert ModelRunner.__dict__["forward"] is sglang_forward  # SGLang's own function object again
    assert DeepseekV2Model.__dict__["forward"] is capture_forward  # the capture patch's own, untouched
    assert _hooks(runner.model) == base_hooks == 1  # the check's hooks are gone


@pytest.mark.parametrize("ids", [[-1, 1, 3], [4, 0], [5]], ids=["identity-no-feed", "permuted", "last-alone"])
def test_pass_for_other_wirings(runner, configure, ids):
    configure(ids)
    runner.prefill(PROMPTS)
    assert selfcheck.pending() == ()


SABOTAGE = {
    "permuted": lambda runner: _sabotage(runner, _swap),
    "shifted": lambda runner: runner.model.model._eagle3_capture_feed.layers.__setitem__(
        slice(None), [i + 1 for i in runner.model.model._eagle3_capture_feed.layers]),
    "partial": lambda runner: _sabotage(runner, lambda fc: torch.cat([fc[:7], torch.zeros_like(fc[7:])])),
    "rows-dropped": lambda runner: _sabotage(runner, lambda fc: fc[:7]),
}


@pytest.mark.parametrize("kind", sorted(SABOTAGE))
def test_sabotaged_capture_is_refused_with_the_message(runner, configure, kind):
    check = configure(IDS)
    SABOTAGE[kind](runner)
    base = _hooks(runner.model)
    with pytest.raises(DeploymentError) as e:
        runner.prefill(PROMPTS)
    text = e.value.problem
    assert e.value.file == WHERE and e.value.field is None and e.value.fix
    assert text.startswith("eagle3-capture self-check FAILED on the first extend batch (tp_rank ")
    assert f"sglang {releases.installed_sglang_version()}" in text and "pid " in text
    assert f"layer ids {IDS}" in text and f"{selfcheck.ENV}=0" in text
    assert "max |diff|" in text or "rows" in text
    assert _hooks(runner.model) == base  # hooks removed on failure too
    assert check in selfcheck.pending()  # still pending: the process does not serve this wiring
    if kind == "permuted":
        assert "fc chunk 0 (layer id 5) is not the output of decoder layer 5" in text
        assert "it is layer id -1's hidden state instead" in text
    if kind == "shifted":
        assert "fc chunk 1 (layer id -1) is not the embedding output" in text
        assert "fc chunk 2 (layer id 1) is not the output of decoder layer 1" in text


def test_stale_capture_is_refused(runner, configure):
    """A feed that hands on an earlier batch's fc input (same shape, other tokens)."""
    other = [[p + 1 for p in prompt] for prompt in PROMPTS]
    configure(IDS)
    selfcheck.disarm()
    stale = runner.prefill(other).aux
    configure(IDS)
    _sabotage(runner, lambda fc: stale.clone())
    with pytest.raises(DeploymentError, match="fc chunk 1 \\(layer id -1\\) is not the embedding output"):
        runner.prefill(PROMPTS)


def test_decode_and_idle_batches_are_skipped_until_an_extend(runner, configure):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    modes = {m.name: selfcheck.is_real_extend(SimpleNamespace(forward_mode=m, input_ids=torch.zeros(3)))
             for m in ForwardMode}
    assert {m for m, on in modes.items() if on} == {"EXTEND", "MIXED"}
    empty = SimpleNamespace(forward_mode=ForwardMode.EXTEND, input_ids=torch.zeros(0))
    assert not selfcheck.is_real_extend(empty)  # an idle DP-attention batch has no tokens
    check = configure(IDS)
    reqs = runner._one_batch.prepare_synthetic_inputs_for_latency_test(len(PROMPTS), None, PROMPTS)
    runner.bench_runner.clear()
    with torch.no_grad():
        next_ids, _, batch = runner.bench_runner.extend(reqs)  # the extend passes the check ...
    assert selfcheck.pending() == ()
    check = configure(IDS)  # ... re-armed: a decode batch does not run it
    with torch.no_grad():
        runner.bench_runner.decode(next_ids, batch)
    assert check in selfcheck.pending() and selfcheck.gate_applied()
    runner.bench_runner.clear()


def test_model_forward_outside_model_runner_forward_does_not_run_it(runner, configure):
    """SGLang's dummy runs, graph warm-ups and captures call the model without ModelRunner.forward: a forward that
    bypasses the class's (gated) method runs no check and leaves it pending."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    check = configure(IDS)
    gated = ModelRunner.__dict__["forward"]
    runner.model_runner.forward = functools.partial(gated.__wrapped__, runner.model_runner)  # the ungated path
    try:
        runner.prefill(PROMPTS)
    finally:
        del runner.model_runner.forward
    assert check in selfcheck.pending()
    runner.prefill(PROMPTS)  # through ModelRunner.forward: checked
    assert selfcheck.pending() == ()


def test_the_forward_after_the_check_runs_the_ops_of_a_forward_without_it(runner, configure):
    configure(IDS)
    selfcheck.disarm()
    runner.prefill(PROMPTS)  # warm
    with AtenOps() as without:
        plain = runner.prefill(PROMPTS)
    configure(IDS)
    with AtenOps() as during:
        checked = runner.prefill(PROMPTS)
    assert selfcheck.pending() == ()
    with AtenOps() as after:
        later = runner.prefill(PROMPTS)
    assert after.ops == without.ops  # the same aten ops, in the same order
    assert len(during.ops) > len(without.ops)  # the check's own references and comparisons
    assert torch.equal(plain.aux, checked.aux) and torch.equal(plain.aux, later.aux)
    assert torch.equal(plain.hidden, checked.hidden)


def test_off_by_environment(runner, monkeypatch, caplog):
    monkeypatch.setenv(selfcheck.ENV, "0")
    with target_patch.patched(), caplog.at_level("WARNING", logger=selfcheck.__name__):
        runner.model.set_eagle3_layers_to_capture(DeclaredLayerIds(IDS, WHERE))
        assert selfcheck.pending() == () and not selfcheck.gate_applied()
    runner.reset_capture()
    assert any(f"{selfcheck.ENV}=0: the first-batch self-check is off" in r.getMessage() for r in caplog.records)


def test_stock_wiring_disarms(runner, configure):
    configure(IDS)
    runner.model.set_eagle3_layers_to_capture([0, 2, 4])  # stock SGLang wiring: nothing declared, nothing checked
    assert selfcheck.pending() == () and not selfcheck.gate_applied()


def test_gate_patch_goes_through_the_patch_engine(runner):
    patch = selfcheck.gate_patch(releases.installed_or_newest())
    assert [s.role for s in patch.seams] == ["selfcheck.gate", "selfcheck.eager_prefill"]
    assert seams.apply(patch) and seams.is_applied(patch)
    seams.revert(patch)
    assert not seams.is_applied(patch)


def test_prefill_graph_replay_is_refused_only_while_pending(runner, configure):
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    own = PrefillCudaGraphRunner.__dict__["can_replay_locally"]
    configure(IDS)
    replacement = PrefillCudaGraphRunner.__dict__["can_replay_locally"]
    assert replacement is not own and replacement(object(), batch_size=1) is False
    runner.prefill(PROMPTS)
    assert PrefillCudaGraphRunner.__dict__["can_replay_locally"] is own


def test_without_the_operand_route_the_release_fallbacks_are_bit_equal_or_fail_closed(runner, configure):
    """With the norm-operand route off: from 0.5.21 the residual stream gives every chunk bit for bit; before, the
    only other route (the fused all-reduce norm) never fires on CPU, so the check refuses rather than pass unseen."""
    check = configure(IDS)
    check.routes = tuple(r for r in check.routes if r != check_core.NORM_OPERANDS)
    if check_core.RESIDUAL_STREAM in check.routes:
        runner.prefill(PROMPTS)
        assert selfcheck.pending() == ()
    else:
        with pytest.raises(DeploymentError, match=r"fc chunk 2 \(layer id 1\): no reference .* none of the routes"):
            runner.prefill(PROMPTS)
