"""core/releases/: a local build of a supported release (``0.5.23+rocm``) is that release, not a refused unknown one."""

import pytest

from sglang_eagle3_capture.core import releases
from sglang_eagle3_capture.core.releases import UnsupportedSGLangVersion, check_sglang_version, supported_versions


@pytest.mark.parametrize("local", ["+rocm", "+cu128", "+cpu.build1"])
def test_a_local_build_of_a_supported_release_is_that_release(local):
    # a local label is neither "newer than the table" nor a different release: refusing it refused a working build
    newest = supported_versions()[-1]
    assert check_sglang_version(newest + local).version == newest
    assert check_sglang_version(supported_versions()[0] + local).version == supported_versions()[0]
    with pytest.raises(UnsupportedSGLangVersion):
        check_sglang_version("0.5.16" + local)  # a local build of an unsupported release stays refused


def test_installed_or_newest_reads_a_local_build_as_its_release(monkeypatch):
    oldest = supported_versions()[0]
    monkeypatch.setattr(releases, "installed_sglang_version", lambda: oldest + "+rocm")
    assert releases.installed_or_newest().version == oldest


@pytest.mark.parametrize("spelling", ["v{}", "{}.0", " {} "])
def test_pep_440_spellings_of_a_supported_release_are_that_release(spelling):
    # packaging.version normalises: v0.5.23 and 0.5.23.0 are 0.5.23 (the hand-written parser refused both)
    oldest = supported_versions()[0]
    assert check_sglang_version(spelling.format(oldest)).version == oldest


@pytest.mark.parametrize("version", ["0.5.23+", "0.5.23+.x", "not-a-version"])
def test_what_is_not_a_pep_440_version_is_refused(version):
    with pytest.raises(UnsupportedSGLangVersion) as e:
        check_sglang_version(version)
    assert version in e.value.problem and e.value.fix
    assert not releases.is_newer_than_table(version)


def test_newer_than_the_table_is_a_pep_440_comparison_of_the_public_version():
    newest = releases.newest().version
    major, minor, patch = (int(x) for x in newest.split("."))
    nxt = f"{major}.{minor}.{patch + 1}"
    for newer in (f"{newest}.post1", f"{nxt}rc1", f"{nxt}.dev0", f"{major}.{minor + 1}.0", f"1!{major}.0"):
        assert releases.is_newer_than_table(newer), newer
    for not_newer in (newest, f"{newest}+rocm", f"{newest}rc1", f"{newest}.dev0", supported_versions()[0], None):
        assert not releases.is_newer_than_table(not_newer), not_newer
