"""core/sglang/guard.py reads a draft's files as every user file is read: bounded, never blocking on a special file, and
an unreadable config.json refuses the start (the guard cannot tell that it declares nothing) instead of letting stock
wiring run."""

import json
import os
import threading
from types import SimpleNamespace

import pytest

from sglang_eagle3_capture.core.config_keys import CONVENTION_KEY
from sglang_eagle3_capture.core.errors import InputError, UnsupportedSGLangVersion
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME
from sglang_eagle3_capture.core.sglang import guard
from sglang_eagle3_capture.core.userfiles import MAX_JSON_BYTES


def _bounded(call, seconds=10):
    """``call()``'s result or exception, failing the test if it blocks (a fifo read with no writer)."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked reading the draft's files"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_plain_cases(tmp_path):
    assert guard.declares_layer_ids(None) is None and guard.declares_layer_ids("org/hub-draft") is None
    assert guard.declares_layer_ids(tmp_path) is None  # no config.json: nothing declared
    (tmp_path / "config.json").write_text(json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1]}}))
    assert guard.declares_layer_ids(tmp_path) is None  # stock ids, not marked with the convention
    (tmp_path / "config.json").write_text(json.dumps({"eagle_config": {CONVENTION_KEY: "x"}}))
    assert guard.declares_layer_ids(tmp_path) == str(tmp_path / "config.json")
    (tmp_path / MANIFEST_FILENAME).write_text("{}")
    assert guard.declares_layer_ids(tmp_path) == str(tmp_path / MANIFEST_FILENAME)


def test_a_fifo_config_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(InputError) as e:
        _bounded(lambda: guard.declares_layer_ids(tmp_path))
    assert "config.json" in str(e.value) and "fix:" in str(e.value)


def test_a_fifo_manifest_counts_as_a_declaration(tmp_path):
    os.mkfifo(tmp_path / MANIFEST_FILENAME)
    assert _bounded(lambda: guard.declares_layer_ids(tmp_path)) == str(tmp_path / MANIFEST_FILENAME)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b" " * (MAX_JSON_BYTES + 1)])
def test_an_unreadable_config_is_refused_naming_it(tmp_path, content):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(InputError) as e:
        guard.declares_layer_ids(tmp_path)
    assert "config.json" in str(e.value) and "fix:" in str(e.value) and len(str(e.value)) < 1000


def test_the_armed_guard_refuses_a_draft_it_cannot_read(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "config.json")
    monkeypatch.setitem(guard._ARMED, "reason", "sglang 9.9 is not supported")
    monkeypatch.setitem(guard._ARMED, "fix", "install sglang 0.5.23")
    monkeypatch.setitem(guard._ARMED, "error", UnsupportedSGLangVersion)
    sa = SimpleNamespace(speculative_algorithm="EAGLE3", speculative_draft_model_path=str(tmp_path))
    with pytest.raises(UnsupportedSGLangVersion) as e:
        _bounded(lambda: guard.check(SimpleNamespace(server_args=sa, is_draft_worker=False)))
    msg = str(e.value)
    assert "cannot be told" in e.value.problem and "sglang 9.9 is not supported" in e.value.problem
    assert "config.json" in msg and e.value.fix
