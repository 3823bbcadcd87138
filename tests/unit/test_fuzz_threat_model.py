"""docs/threat-model.md, the promises a reading of the source can prove: what the package never executes and where
it writes. (The promises about hostile files are proven by the other test_fuzz_*.py modules.)

- every ``torch.load`` passes ``weights_only=True``; nothing imports pickle, marshal, dill or runpy, calls ``eval``,
  ``exec``, ``compile``, ``os.system`` or ``subprocess``, or passes ``trust_remote_code``;
- every write to a user's file goes through core/userfiles.py (atomic, umask modes), except the two that are listed:
  ``convert``'s ``safetensors.save_file`` into its own temporary directory (then userfiles.finish_file), and the
  crash report (``tempfile.mkstemp``, mode 0600, in the temporary directory) of the command line;
- a malicious pickle among the samples is refused and does not run.
"""

import ast
import pickle
from pathlib import Path

import pytest

from support import REPO
from support.hostile_inputs import FIXTURE, run_cli

PACKAGE = REPO / "sglang_eagle3_capture"
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
FORBIDDEN_MODULES = {"pickle", "marshal", "dill", "cloudpickle", "runpy", "subprocess", "shelve"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
WRITE_METHODS = {"write_text", "write_bytes", "save_file", "mkstemp", "mkdtemp", "NamedTemporaryFile", "fdopen"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
ALLOWED_WRITES = {("userfiles.py", "mkstemp"), ("userfiles.py", "mkdtemp"), ("userfiles.py", "fdopen"),
                  ("userfiles.py", "write_text"), ("convert.py", "save_file"), ("cli.py", "mkstemp"),
                  ("cli.py", "fdopen")}


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
            yield node, name, owner


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_is_executed_from_a_file(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            assert not {n.split(".")[0] for n in names if n} & FORBIDDEN_MODULES, f"{path.name}: imports {names}"
    for node, name, owner in _calls(tree):
        if name in FORBIDDEN_CALLS and not isinstance(node.func, ast.Attribute):
            pytest.fail(f"{path.name}:{node.lineno}: calls {name}()")
        if name == "system" and owner == "os":
            pytest.fail(f"{path.name}:{node.lineno}: calls os.system()")
        keywords = {k.arg: k.value for k in node.keywords}
        if "trust_remote_code" in keywords:
            pytest.fail(f"{path.name}:{node.lineno}: passes trust_remote_code")
        if name == "load" and owner == "torch":
            wo = keywords.get("weights_only")
            assert isinstance(wo, ast.Constant) and wo.value is True, f"{path.name}:{node.lineno}: torch.load " \
                                                                       "without weights_only=True"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_write_goes_through_userfiles(path):
    tree = ast.parse(path.read_text(), str(path))
    for node, name, owner in _calls(tree):
        if name in WRITE_METHODS:
            assert (path.name, name) in ALLOWED_WRITES, f"{path.name}:{node.lineno}: {name}() outside core/userfiles.py"
        if name == "open" and owner == "os" and len(node.args) > 1:  # flags: only reading (or /dev/null)
            flags = {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            devnull = isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "devnull"
            assert devnull or not flags & WRITE_FLAGS, f"{path.name}:{node.lineno}: os.open for writing"
        elif name == "open" and len(node.args) > 1:
            mode = node.args[1]
            assert isinstance(mode, ast.Constant) and "r" in mode.value, f"{path.name}:{node.lineno}: open for writing"


def test_a_malicious_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "PWNED"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    data = tmp_path / "samples"
    data.mkdir()
    (data / "data_0.pt").write_bytes(pickle.dumps({"input_ids": Evil()}))
    r = run_cli(["verify", FIXTURE / "draft", "--data", data, "--no-progress"])
    assert r.rc == 2 and "weights_only=True" in r.err and r.err.count("\n") == 1 and "fix:" in r.err
    assert not marker.exists()
