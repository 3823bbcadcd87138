"""The unit tier's offline environment (tests/unit/conftest.py ``_no_network``) ends with its test, even when the test
rebinds ``os.environ``, as datasets' ``Dataset.map(num_proc=...)`` does (speculators' data preparation): a
network-marked test that runs later in the same process still reaches the package index (cold CI, 2026-12-04: the
vLLM wheel probes could not download after tests/unit/test_speculators_trained.py)."""

import copy
import os

import pytest


def test_a_test_that_rebinds_os_environ():
    os.environ = copy.deepcopy(os.environ)  # what datasets/arrow_dataset.py does around its process pool
    assert os.environ.get("PIP_NO_INDEX") == "1"


@pytest.mark.network
def test_a_network_test_after_it_can_reach_the_index():
    assert "PIP_NO_INDEX" not in os.environ and "HF_HUB_OFFLINE" not in os.environ
