"""The command line: manifest write/show, convert, error reporting, and the subcommand registry."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_eagle3_capture.core.errors import InputError
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, read_manifest
from sglang_eagle3_capture.doctor import cli
from sglang_eagle3_capture.doctor.manifest_write import write_draft_manifest
from support.cli import run
from support.speculators_drafts import build_specforge_draft, build_speculators_draft, write_target

VENV_BIN = Path(sys.executable).parent


@pytest.fixture
def target(tmp_path):
    return write_target(tmp_path / "kimi")


@pytest.fixture
def draft(tmp_path):
    return build_specforge_draft(tmp_path / "draft", ids=(1, 29, 57))


def test_manifest_write_then_show(capsys, draft, target):
    rc, out, err = run(capsys, "manifest", "write", str(draft), "--layer-ids=-1,2,30", "--target", str(target),
                       "--note", "fc trained on embed, layer3, layer31")
    assert (rc, err) == (0, "")
    assert "fc width checked" in out
    assert "disagrees with the manifest" in out  # the SpecForge config's eagle_config says [1, 29, 57]
    m = read_manifest(draft)
    assert m.layer_ids == (-1, 2, 30) and m.target_num_hidden_layers == 61
    assert m.provenance == {"source": "manual", "convention": "layer-id",
                            "note": "fc trained on embed, layer3, layer31"}
    rc, out, _ = run(capsys, "manifest", "show", str(draft), "--json")
    assert rc == 0 and json.loads(out) == m.to_dict()
    rc, out, _ = run(capsys, "manifest", "show", str(draft))
    assert rc == 0 and "[-1, 2, 30]" in out and "[0, 3, 31]" in out and "KimiK25ForConditionalGeneration" in out


def test_layer_ids_with_a_space_and_target_config_file(capsys, draft, target):
    rc, _, err = run(capsys, "manifest", "write", str(draft), "--layer-ids", "-1,2,30", "--target",
                     str(target / "config.json"))
    assert (rc, err) == (0, "")
    assert read_manifest(draft).layer_ids == (-1, 2, 30)


def test_manifest_write_refuses_to_overwrite_without_force(capsys, draft, target):
    assert run(capsys, "manifest", "write", str(draft), "--layer-ids=1,29,57", "--target", str(target))[0] == 0
    rc, _, err = run(capsys, "manifest", "write", str(draft), "--layer-ids=-1,2,30", "--target", str(target))
    assert rc == 2 and f"{draft / MANIFEST_FILENAME}: field '<file>': " in err and "--force" in err.split("fix:")[1]
    with pytest.raises(InputError) as e:
        write_draft_manifest(draft, [-1, 2, 30], target)
    assert (e.value.file, e.value.field) == (str(draft / MANIFEST_FILENAME), "<file>") and "--force" in e.value.fix
    assert read_manifest(draft).layer_ids == (1, 29, 57)
    assert run(capsys, "manifest", "write", str(draft), "--layer-ids=-1,2,30", "--target", str(target),
               "--force")[0] == 0
    assert read_manifest(draft).layer_ids == (-1, 2, 30)


def test_fc_width_mismatch_is_one_line_and_writes_nothing(capsys, draft, target):
    rc, out, err = run(capsys, "manifest", "write", str(draft), "--layer-ids=-1,2", "--target", str(target))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("sglang-eagle3-capture: error: ")
    assert str(draft / "model.safetensors") in err and "fc.weight" in err and "layer_ids" in err
    assert not (draft / MANIFEST_FILENAME).exists()


@pytest.mark.parametrize("argv, names", [  # names: what the line must name (a file, a field, or both)
    (["manifest", "show", "{missing}"], ["{missing}"]),
    (["manifest", "write", "{draft}", "--layer-ids=-1,x", "--target", "{target}"], ["field '--layer-ids': "]),
    (["manifest", "write", "{draft}", "--layer-ids=-1,2,61", "--target", "{target}"], ["field 'layer_ids'"]),
    (["manifest", "write", "{draft}", "--layer-ids=-1,2,30", "--target", "{missing}"], ["{missing}"]),
    (["manifest", "write", "{draft}/model.safetensors", "--layer-ids=-1,2,30", "--target", "{target}"],
     ["{draft}/model.safetensors: field 'DRAFT_DIR': "]),
    (["convert", "{draft}", "{draft}", "--target", "{target}"], ["{draft}"]),
    (["verify", "{draft}", "--data", "{draft}", "--top-k", "0"], ["error: field '--top-k': "]),
    (["bogus"], ["error: field 'COMMAND': "]),
])
def test_user_errors_exit_2_with_one_line(capsys, tmp_path, draft, target, argv, names):
    fill = {"missing": tmp_path / "nope", "draft": draft, "target": target}
    rc, _, err = run(capsys, *[a.format(**fill) for a in argv])
    assert rc == 2 and err.count("\n") == 1 and "fix:" in err and "Traceback" not in err
    assert all(n.format(**fill) in err for n in names), err


def test_usage_errors_exit_2(capsys):
    assert run(capsys, "bogus")[0] == 2
    assert run(capsys, "manifest", "write", "d")[0] == 2  # --layer-ids and --target are required
    assert run(capsys, "--help")[0] == 0


def test_convert_command(capsys, tmp_path, target):
    src = build_speculators_draft(tmp_path / "spec")
    capsys.readouterr()  # drop save_pretrained's progress bar
    rc, out, err = run(capsys, "convert", str(src), str(tmp_path / "out"), "--target", str(target))
    assert (rc, err) == (0, "")
    assert "layer ids [-1, 2, 30]" in out and "not copied: config.py" in out
    assert read_manifest(tmp_path / "out").layer_ids == (-1, 2, 30)
    rc, out, _ = run(capsys, "convert", str(src), str(tmp_path / "out2"), "--target", str(target), "--layer-ids",
                     "-1,3,30")
    assert rc == 0 and read_manifest(tmp_path / "out2").layer_ids == (-1, 3, 30) and "overrides" in out


def test_entry_points_run_without_traceback_and_without_torch(tmp_path):
    """``python -m`` and the console script: user errors are one line; manifest commands never import torch."""
    probe = ("import sys, runpy; sys.argv = ['x', 'manifest', 'show', sys.argv[1]]\n"
             "try:\n    runpy.run_module('sglang_eagle3_capture', run_name='__main__')\n"
             "except SystemExit as e:\n    print('rc', e.code, 'torch' in sys.modules, 'sglang' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "rc 2 False False", p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and str(tmp_path) in p.stderr and "fix:" in p.stderr
    script = VENV_BIN / "sglang-eagle3-capture"
    if not script.exists():
        pytest.skip(f"console script not installed at {script} (pip install -e . creates it)")
    p = subprocess.run([str(script), "manifest", "show", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr and str(tmp_path) in p.stderr


def test_subcommand_registry_accepts_other_modules(capsys, tmp_path, monkeypatch):
    (tmp_path / "cli_hello_ext.py").write_text(
        "from sglang_eagle3_capture.core.errors import InputError\n"
        "def _hello(args):\n"
        "    if args.name == 'bad':\n"
        "        raise InputError('hello.txt', 'name', 'bad name', 'pick another')\n"
        "    print('hello', args.name)\n"
        "    return 0\n"
        "def add_subcommand(sub):\n"
        "    p = sub.add_parser('hello')\n"
        "    p.add_argument('name')\n"
        "    p.set_defaults(handler=_hello)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "SUBCOMMAND_MODULES", [*cli.SUBCOMMAND_MODULES, "cli_hello_ext"])
    assert run(capsys, "hello", "world")[:2] == (0, "hello world\n")
    rc, _, err = run(capsys, "hello", "bad")
    assert rc == 2 and err == "sglang-eagle3-capture: error: hello.txt: field 'name': bad name; fix: pick another\n"
    assert run(capsys, "manifest", "show", str(tmp_path))[0] == 2  # built-ins still there


@pytest.mark.parametrize("shape, length", [([], 4), ([192], 768)])
def test_an_fc_weight_that_is_not_2d_is_refused_naming_the_file_by_every_command(capsys, tmp_path, draft, target,
                                                                                   shape, length):
    # `shape: []` used to raise IndexError from shape[-1] (exit 70) and a 1-D fc.weight passed its length as a width
    from support.hostile_inputs import st_write

    def flatten(d):
        st_write(d / "model.safetensors", {"fc.weight": {"dtype": "F32", "shape": shape, "data_offsets": [0, length]}},
                 b"\0" * length)

    flatten(draft)
    rc, _, err = run(capsys, "manifest", "write", str(draft), "--layer-ids=-1,2,30", "--target", str(target))
    assert rc == 2 and f"{draft / 'model.safetensors'}: " in err and "fc.weight" in err and "fix:" in err
    good = build_specforge_draft(tmp_path / "good", ids=(1, 29, 57))
    assert run(capsys, "manifest", "write", str(good), "--layer-ids=-1,2,30", "--target", str(target))[0] == 0
    flatten(good)
    rc, _, err = run(capsys, "inspect", str(good))
    assert rc == 2 and f"{good / 'model.safetensors'}: " in err and "fc.weight" in err
    src = build_speculators_draft(tmp_path / "spec")
    capsys.readouterr()
    flatten(src)
    rc, _, err = run(capsys, "convert", str(src), str(tmp_path / "out"), "--target", str(target))
    assert rc == 2 and f"{src / 'model.safetensors'}: " in err and "fc.weight" in err


@pytest.mark.parametrize("content", ["{not json", json.dumps({"layer_ids": "broken"})])
def test_manifest_write_over_an_invalid_manifest_asks_for_force(capsys, draft, target, content):
    # an existing but invalid manifest used to fail reading it, with a fix to "rewrite it with manifest write", the
    # very command just run, and no word of --force
    (draft / MANIFEST_FILENAME).write_text(content)
    rc, _, err = run(capsys, "manifest", "write", str(draft), "--layer-ids=-1,2,30", "--target", str(target))
    assert rc == 2 and f"{draft / MANIFEST_FILENAME}: field '<file>': " in err and "--force" in err.split("fix:")[1]
    assert (draft / MANIFEST_FILENAME).read_text() == content
    assert run(capsys, "manifest", "write", str(draft), "--layer-ids=-1,2,30", "--target", str(target),
               "--force")[0] == 0
    assert read_manifest(draft).layer_ids == (-1, 2, 30)
