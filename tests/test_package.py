"""Packaging promises: cheap import, declared entry points, supported-version check."""

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import sglang_eagle3_capture
from sglang_eagle3_capture._compat import UnsupportedSGLangVersion, check_sglang_version

ROOT = Path(__file__).resolve().parents[1]


def test_import_does_not_import_sglang_or_touch_cuda():
    # A clean interpreter: conftest's environment must not hide an eager import.
    code = (
        "import sys, json, sglang_eagle3_capture\n"
        "mods = [m for m in ('sglang', 'torch', 'triton', 'sgl_kernel') if m in sys.modules]\n"
        "print(json.dumps(mods))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_entry_points_are_declared_in_the_installed_metadata():
    dist = metadata.distribution("sglang-eagle3-capture")
    eps = {(ep.group, ep.name): ep.value for ep in dist.entry_points}
    assert eps[("sglang.srt.plugins", "eagle3_capture")] == "sglang_eagle3_capture.plugin:register"
    assert eps[("console_scripts", "sglang-eagle3-capture")] == "sglang_eagle3_capture.cli:main"


def test_plugin_group_name_is_the_one_sglang_reads():
    from sglang.srt import plugins

    src = Path(plugins.__file__).read_text()
    assert '"sglang.srt.plugins"' in src or "'sglang.srt.plugins'" in src


def test_installed_sglang_is_supported():
    assert check_sglang_version() == metadata.version("sglang")


@pytest.mark.parametrize("version", ["0.5.11", "0.5.17", "0.6.0", "0.5.23rc1"])
def test_unsupported_versions_are_refused_with_the_fix(version):
    with pytest.raises(UnsupportedSGLangVersion) as e:
        check_sglang_version(version)
    assert version in str(e.value) and "pip install sglang==" in str(e.value)


def test_pinned_sglang_matches_supported_range():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'"sglang=={sglang_eagle3_capture.SUPPORTED_SGLANG_VERSIONS[-1]}"' in text


def test_package_does_not_ship_the_cpu_shim():
    bad = ("sgl_kernel", "SGLANG_USE_CPU_ENGINE", "TRITON_INTERPRET")
    for path in (ROOT / "sglang_eagle3_capture").rglob("*.py"):
        text = path.read_text()
        assert not any(b in text for b in bad), path


def test_lazy_public_names_resolve():
    for name in sglang_eagle3_capture._LAZY:
        assert callable(getattr(sglang_eagle3_capture, name)), name
    with pytest.raises(AttributeError):
        sglang_eagle3_capture.no_such_name
