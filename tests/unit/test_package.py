"""Packaging promises: cheap import, declared entry points, supported-version check (core/releases/).

That SGLang reads the entry points' group is checked in tests/inprocess/test_plugin.py.
"""

import json
import subprocess
import sys
from importlib import metadata

import pytest

import sglang_eagle3_capture
from sglang_eagle3_capture.core.releases import UnsupportedSGLangVersion, check_sglang_version, supported_versions
from support import REPO


def test_import_does_not_import_sglang_or_touch_cuda():
    # A clean interpreter: conftest's environment must not hide an eager import.
    code = (
        "import sys, json, sglang_eagle3_capture\n"
        "mods = [m for m in ('sglang', 'torch', 'triton', 'sgl_kernel') if m in sys.modules]\n"
        "print(json.dumps(mods))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_entry_points_are_declared_in_the_installed_metadata():
    dist = metadata.distribution("sglang-eagle3-capture")
    eps = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert eps[("sglang.srt.plugins", "eagle3_capture")] == "sglang_eagle3_capture.core.sglang.plugin:register"
    assert eps[("console_scripts", "sglang-eagle3-capture")] == "sglang_eagle3_capture.doctor.cli:main"
    assert eps[("vllm.general_plugins", "eagle3_capture")] == "sglang_eagle3_capture.core.vllm.plugin:register"


def test_installed_sglang_is_supported():
    release = check_sglang_version()
    assert release.version == metadata.version("sglang") and release.supported


@pytest.mark.parametrize("version", ["0.5.11", "0.5.15.post1", "0.6.0", "0.5.23rc1", "0.5.16"])
def test_unsupported_versions_are_refused_with_the_fix(version):
    with pytest.raises(UnsupportedSGLangVersion) as e:
        check_sglang_version(version)
    assert (e.value.file, e.value.field) == (None, None)
    assert version in e.value.problem and "pip install sglang==" in e.value.fix


def test_a_missing_sglang_is_refused_with_the_fix(monkeypatch):
    from sglang_eagle3_capture.core import releases

    monkeypatch.setattr(releases, "installed_sglang_version", lambda: None)
    with pytest.raises(UnsupportedSGLangVersion) as e:
        check_sglang_version()
    assert (e.value.file, e.value.field) == (None, None) and "pip install sglang==" in e.value.fix


def test_the_install_range_is_exactly_the_supported_releases():
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("sglang")]
    supported = supported_versions()
    oldest, newest = supported[0], supported[-1]
    major, minor, patch = (int(x) for x in newest.split("."))
    assert spec == f"sglang>={oldest},<{major}.{minor}.{patch + 1}", spec
    # every release inside the range has a file in the table, supported
    assert [v for v in supported] == [f"0.5.{p}" for p in range(int(oldest.split('.')[-1]), patch + 1)]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_supported_releases_are_accepted(version):
    assert check_sglang_version(version).version == version


def test_package_does_not_ship_the_cpu_shim():
    bad = ("sgl_kernel", "SGLANG_USE_CPU_ENGINE", "TRITON_INTERPRET")
    for path in (REPO / "sglang_eagle3_capture").rglob("*.py"):
        text = path.read_text()
        assert not any(b in text for b in bad), path


def test_lazy_public_names_resolve():
    for name in sglang_eagle3_capture._LAZY:
        assert callable(getattr(sglang_eagle3_capture, name)), name
    with pytest.raises(AttributeError):
        sglang_eagle3_capture.no_such_name
