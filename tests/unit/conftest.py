"""The unit tier: tests that never import sglang (tests/unit/test_tiers.py checks the modules' imports) and never
reach the network unless marked ``network`` (make quick leaves those out). Each runs torch on one thread: its
tensors are tiny, and on a shared, loaded machine the extra OpenMP threads spin (test_doctor_verify.py took 56 s
with two threads, 7 s with one)."""

import ipaddress
import os
import socket
import sys

import pytest
import torch

# Child processes a unit test starts find no package index and no model hub either.
OFFLINE_ENV = {"PIP_NO_INDEX": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(autouse=True)
def _one_torch_thread(monkeypatch):
    """torch on one intra-op thread here and in the test's child processes; the session's setting comes back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _no_sglang_import(request):
    """Fail a unit test that imports sglang (seen when this tier runs first in its process, e.g. pytest tests/unit)."""
    before = "sglang" in sys.modules
    yield
    if not before and "sglang" in sys.modules:
        pytest.fail(f"{request.node.nodeid} imported sglang; a test that needs SGLang belongs in tests/inprocess/ or "
                    "tests/engine/")


def _is_local(address) -> bool:
    if not isinstance(address, tuple):  # AF_UNIX: a path
        return True
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # a host name: resolving it is already network access


@pytest.fixture(autouse=True)
def _no_network(request, monkeypatch):
    """A unit test not marked ``network`` may open only local sockets, and its child processes run offline."""
    if request.node.get_closest_marker("network"):
        yield
        return
    connect = socket.socket.connect

    def local_only(self, address):
        if not _is_local(address):
            raise OSError(f"{request.node.nodeid} connected to {address!r}: mark it network (pytest -m network)")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    saved = {key: os.environ.get(key) for key in OFFLINE_ENV}
    os.environ.update(OFFLINE_ENV)
    yield
    # Put back on os.environ as it is now, not through monkeypatch: datasets' Dataset.map(num_proc=...) (speculators'
    # data preparation, fixtures/speculators_trained.py) rebinds os.environ to a copy taken during the test, so undoing
    # on the object monkeypatch saw left PIP_NO_INDEX set for every later test of the process, and the network-marked
    # ones could not download (tests/unit/test_vllm_release_seams_static.py, cold CI, 2026-12-04).
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
