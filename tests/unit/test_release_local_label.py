"""releases/: a local build of a supported release (``0.5.23+rocm``) is that release, not a refused unknown one."""

import pytest

from sglang_eagle3_capture import releases
from sglang_eagle3_capture.releases import UnsupportedSGLangVersion, check_sglang_version, supported_versions


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
