"""core/capture.py: the one per-forward refusal (the final-norm capture of another batch) is a package error
(CaptureError: Eagle3CaptureError and, as before, RuntimeError) naming where the ids came from and the fix."""

from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.core.capture import CaptureError, FcFeed, plan_capture
from sglang_eagle3_capture.core.errors import Eagle3CaptureError

WHERE = "draft/eagle3_manifest.json: field 'layer_ids'"


def _feed(ids):
    plan = plan_capture(ids, 6, where=WHERE)
    layers = list(plan.loop_indices)
    return FcFeed(plan, layers, None, 6, model_name="StackModel"), SimpleNamespace(layers_to_capture=layers, norm=None)


def test_a_missing_last_layer_output_is_a_capture_error():
    feed, model = _feed([5, -1])
    with pytest.raises(Eagle3CaptureError) as e:
        feed(model, (torch.zeros(2, 3), torch.zeros(2, 3)), None, None, None)
    assert isinstance(e.value, CaptureError) and isinstance(e.value, RuntimeError)  # old `except RuntimeError` holds
    assert e.value.file == WHERE and e.value.field is None and e.value.fix


def test_a_replaced_capture_list_is_no_longer_checked_per_forward():
    # what the chunks are is proven by the first-batch self-check; the feed only reports that it no longer knows
    feed, model = _feed([3, -1])
    model.layers_to_capture = list(model.layers_to_capture)
    assert feed.fed_layer_ids(model.layers_to_capture) is None
    assert feed(model, (torch.zeros(2, 3), torch.zeros(2, 6)), None, None, None)[1].shape == (2, 6)


def test_family_facts_are_never_defaulted():
    # the stack's name comes from the family table at every call site, not from a DeepSeek default
    plan = plan_capture([3, -1], 6, where=WHERE)
    with pytest.raises(TypeError):
        FcFeed(plan, list(plan.loop_indices))
