"""An SGLang newer than the release table (core/sglang/plugin.py, core/releases/__init__.py), presented to the installed
release: served unverified with a WARNING when every seam probes clean and the self-check is on; refused when a
single seam does not fit or the self-check is off."""

import logging

import pytest
from packaging.version import Version

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.errors import UnsupportedSGLangVersion
from sglang_eagle3_capture.core.families import family_of
from sglang_eagle3_capture.core.sglang import draft, guard, plugin, selfcheck, target
from sglang_eagle3_capture.doctor import release_table

NEWEST = releases.newest().version  # from the release table: adding a release file moves it
_MAJOR, _MINOR, _PATCH = (*Version(NEWEST).release, 0, 0)[:3]
NEWER = f"{_MAJOR}.{_MINOR}.{_PATCH + 1}"
INSTALLED = releases.installed_sglang_version()
pytestmark = pytest.mark.skipif(INSTALLED != releases.newest().version,
                                reason="a newer version is presented to the newest supported release only")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    def reset():
        target.revert()
        draft.revert_draft_head_patch()
        guard.disarm()
        selfcheck.disarm()
        releases._UNVERIFIED.clear()

    reset()
    monkeypatch.setattr(releases, "installed_sglang_version", lambda: NEWER)
    import sglang.srt.model_executor.model_runner  # noqa: F401 - the trigger module, imported: register acts now

    yield
    reset()


def test_version_order():
    assert releases.is_newer_than_table(NEWER) and releases.is_newer_than_table(f"{NEWEST}.post1")
    assert releases.is_newer_than_table(f"{_MAJOR}.{_MINOR + 1}.0rc1") and not releases.is_newer_than_table(NEWEST)
    oldest = release_table.all_releases()[0].version
    assert not releases.is_newer_than_table(oldest) and not releases.is_newer_than_table(f"{NEWEST}rc1")
    assert not releases.is_newer_than_table("not-a-version") and not releases.is_newer_than_table(None)


def test_a_newer_release_whose_seams_probe_clean_runs_unverified_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="sglang_eagle3_capture"):
        plugin.register()
    assert releases.unverified() == NEWER and target.is_patched() and draft.is_draft_head_patched()
    assert not guard.is_armed()
    assert releases.check_sglang_version().version == releases.newest().version  # its facts serve it now
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and NEWER in r.getMessage()]
    assert "newer than the release table" in line and "UNVERIFIED" in line and "self-check" in line
    assert f"patched as {releases.newest().version}" in line
    plugin.register()  # idempotent
    assert releases.unverified() == NEWER


def test_the_self_check_names_the_unverified_release():
    releases.accept_unverified(NEWER)
    check = selfcheck.SelfCheck(object.__new__(type("S", (), {})), type("P", (), {"layer_ids": (0,)})(),
                                family_of("LlamaForCausalLM"), releases.newest().selfcheck_routes, num_hidden_layers=2,
                                where="m")
    assert f"sglang {NEWER} (newer than the release table: patched as {releases.newest().version}, unverified" in \
        check.context()


def test_any_seam_that_does_not_fit_refuses_it(monkeypatch, caplog):
    from sglang.srt.model_executor.runner.prefill_cuda_graph_runner import PrefillCudaGraphRunner

    def can_replay_locally(self, *, batch_size, num_tokens):  # a newer SGLang's other shape
        return False

    monkeypatch.setattr(PrefillCudaGraphRunner, "can_replay_locally", can_replay_locally)
    with caplog.at_level(logging.ERROR, logger="sglang_eagle3_capture"):
        plugin.register()  # at the trigger: probed, refused; load_plugins would go on either way
    assert releases.unverified() is None and not target.is_patched() and guard.is_armed()
    (line,) = [r.getMessage() for r in caplog.records if "not patching" in r.getMessage()]
    assert f"sglang {NEWER} is newer than the releases" in line
    assert "PrefillCudaGraphRunner.can_replay_locally: PatchError" in line and "pip install sglang==" in line


def test_with_the_self_check_off_it_is_refused(monkeypatch):
    monkeypatch.setenv(selfcheck.ENV, "0")
    with pytest.raises(UnsupportedSGLangVersion) as e:
        plugin.register()
    assert (e.value.file, e.value.field) == (None, None) and "pip install sglang==" in e.value.fix
    assert "turns off the first-batch self-check" in e.value.problem
    assert guard.is_armed() and not target.is_patched()


def test_a_self_check_value_that_does_not_read_refuses_it(monkeypatch):
    """The one switch rule (core/switches.py): ``maybe`` is not the check a newer release needs, so it is refused as
    with the check off, the guard armed."""
    monkeypatch.setenv(selfcheck.ENV, "maybe")
    with pytest.raises(UnsupportedSGLangVersion) as e:
        plugin.register()
    assert selfcheck.ENV in e.value.problem and guard.is_armed() and not target.is_patched()


def test_every_seam_of_the_installed_release_probes_clean():
    """What a newer release is held to, on the installed one."""
    assert plugin.probe_release(release_table.get(INSTALLED)) == []
