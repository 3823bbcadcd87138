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


def test_the_sglang_extra_is_exactly_the_supported_releases():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (spec,) = project["optional-dependencies"]["sglang"]
    supported = supported_versions()
    oldest, newest = supported[0], supported[-1]
    major, minor, patch = (int(x) for x in newest.split("."))
    assert spec == f"sglang>={oldest},<{major}.{minor}.{patch + 1}", spec
    # every release inside the range has a file in the table, supported
    assert [v for v in supported] == [f"0.5.{p}" for p in range(int(oldest.split('.')[-1]), patch + 1)]


@pytest.fixture(scope="module")
def wheel_metadata(tmp_path_factory):
    """The METADATA, entry points and file list of the wheel ``pip wheel`` builds from this checkout, offline (a copy
    of what the wheel is built from, so the checkout gets no build/ or egg-info)."""
    import shutil
    import zipfile

    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copy(REPO / "README.md", src)
    shutil.copytree(REPO / "sglang_eagle3_capture", src / "sglang_eagle3_capture",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True, text=True)
    (whl,) = out.glob("sglang_eagle3_capture-*.whl")
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        eps = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        return z.read(meta).decode(), z.read(eps).decode(), names


def test_the_wheel_never_requires_sglang_outside_its_extra(wheel_metadata):
    """pip install sglang-eagle3-capture leaves the environment's SGLang as it is; the doctor's needs come along."""
    from packaging.requirements import Requirement

    meta, _, _ = wheel_metadata
    reqs = [Requirement(line.split(":", 1)[1]) for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    base = {r.name for r in reqs if r.marker is None}
    assert {"torch", "safetensors", "packaging", "msgspec"} <= base and "sglang" not in base
    assert "torch" in next(r for r in reqs if r.name == "safetensors").extras  # its save_file writes through numpy
    (sglang,) = [r for r in reqs if r.name == "sglang"]
    assert sglang.marker is not None and sglang.marker.evaluate({"extra": "sglang"})
    assert not sglang.marker.evaluate({"extra": "test"}) and not sglang.marker.evaluate({"extra": ""})
    assert sglang.specifier.contains(supported_versions()[0]) and "Provides-Extra: sglang" in meta


def test_the_wheel_ships_the_package_and_its_entry_points_only(wheel_metadata):
    _, eps, names = wheel_metadata
    assert "eagle3_capture = sglang_eagle3_capture.core.sglang.plugin:register" in eps
    assert "sglang-eagle3-capture = sglang_eagle3_capture.doctor.cli:main" in eps
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"sglang_eagle3_capture"}, top
    assert "sglang_eagle3_capture/core/sglang/plugin.py" in names and "sglang_eagle3_capture/doctor/cli.py" in names


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
