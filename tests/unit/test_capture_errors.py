"""serving/capture.py: every refusal of a forward is a package error (CaptureError: Eagle3CaptureError and, as before,
RuntimeError) whose message says the fix."""

from types import SimpleNamespace

import pytest
import torch

from sglang_eagle3_capture.errors import Eagle3CaptureError
from sglang_eagle3_capture.families.schema import LIST, PACKED
from sglang_eagle3_capture.serving.capture import CaptureError, FcFeed, plan_capture

WHERE = "draft/eagle3_manifest.json: field 'layer_ids'"


def _feed(ids, container=PACKED):
    plan = plan_capture(ids, 6, where=WHERE)
    layers = list(plan.loop_indices)
    return FcFeed(plan, layers, None, 6, container=container, model_name="StackModel"), \
        SimpleNamespace(layers_to_capture=layers, norm=None)


def _refusal(call):
    with pytest.raises(Eagle3CaptureError) as e:
        call()
    assert isinstance(e.value, CaptureError) and isinstance(e.value, RuntimeError)  # old `except RuntimeError` holds
    assert "fix:" in str(e.value).lower()
    return str(e.value)


def test_a_replaced_capture_list_is_a_capture_error_with_a_fix():
    feed, model = _feed([3, -1])
    model.layers_to_capture = list(model.layers_to_capture)
    msg = _refusal(lambda: feed(model, (torch.zeros(2, 3), torch.zeros(2, 6)), None, None, None))
    assert "fix: call set_eagle3_layers_to_capture again" in msg


def test_a_huge_replaced_list_is_shown_bounded():
    feed, model = _feed([3, -1])
    model.layers_to_capture = list(range(10_000))
    assert len(_refusal(lambda: feed(model, (torch.zeros(2, 3), torch.zeros(2, 6)), None, None, None))) < 1000


def test_a_wrong_container_and_a_short_list_are_capture_errors():
    feed, model = _feed([3, -1])
    _refusal(lambda: feed(model, (torch.zeros(2, 3), [torch.zeros(2, 3)] * 2), None, None, None))
    feed, model = _feed([3, -1], container=LIST)
    _refusal(lambda: feed(model, (torch.zeros(2, 3), [torch.zeros(2, 3)]), None, None, None))


def test_a_missing_last_layer_output_is_a_capture_error():
    feed, model = _feed([5, -1])
    _refusal(lambda: feed(model, (torch.zeros(2, 3), torch.zeros(2, 3)), None, None, None))


def test_family_facts_are_never_defaulted():
    # the container and the stack's name come from the family table at every call site, not from a DeepSeek default
    plan = plan_capture([3, -1], 6, where=WHERE)
    with pytest.raises(TypeError):
        FcFeed(plan, list(plan.loop_indices))
    from sglang_eagle3_capture.serving import selfcheck

    with pytest.raises(TypeError):
        selfcheck.Anatomy()
