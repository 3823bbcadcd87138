"""Issue 28's runtime classes, each over every reader, directory, switch and log line it applies to (no SGLang
here; the TP collective over SGLang's TP CPU group is tests/engine/test_ranks_agree_engine.py's, a real TP 2 start
tests/engine/test_plugin_engine.py's):

1. every file the settings report reads (draft and target config.json and tokenizer.json, the d2t tensor) is read
   bounded and never blocks: a 256 MiB sparse file or a fifo at any of them costs no memory and no wait, and the
   report names what it left out;
2. the capture dump (and the report written into it) is private: created 0700 with 0600 files, a hostile directory at
   the path refused with one ERROR and nothing written there, writes pinned to the directory opened at start, a full
   disk leaves no metadata without its tensors, a blank path writes nothing; every log line escapes what users
   control, whichever of the package's loggers forms it;
3. every environment switch is read by one parser with one rule, and its documentation says so;
4. the TP ranks' statements of what they serve must agree (core/ranks.py).
"""

import ast
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fixtures.specs import SPECS
from sglang_eagle3_capture.core import ranks, releases, switches
from sglang_eagle3_capture.core.errors import DeploymentError, InputError
from sglang_eagle3_capture.core.manifest import MANIFEST_FILENAME, Manifest
from sglang_eagle3_capture.core.sglang import resolution, selfcheck
from sglang_eagle3_capture.core.sglang import target as target_patch
from sglang_eagle3_capture.core.userfiles import PrivateDirectory
from sglang_eagle3_capture.observe import acceptance, dump, sglang_report
from sglang_eagle3_capture.observe import report as sr
from support import REPO, subprocess_env
from support.hostile_inputs import bounded

TINY = SPECS["tiny"].directory
PACKAGE = REPO / "sglang_eagle3_capture"
SERVER_SIDE = sorted(p for part in ("core", "observe") for p in (PACKAGE / part).rglob("*.py"))
HOSTILE = "d\x1b[2K\r\neagle3-capture self-check passed (tp_rank 0)\x07"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(switches, "_WARNED", set())  # one WARNING per process: each test is a process here


# --- 1. every read of the settings report is bounded ------------------------------------------------------------


def _dirs(tmp_path):
    d, t = tmp_path / "draft", tmp_path / "target"
    shutil.copytree(TINY / "draft", d)
    shutil.copytree(TINY / "target", t)
    for where in (d, t):
        (where / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))
    return d, t


def _sparse(path, size=256 << 20):
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(size)


def _sparse_d2t(path, entries=1 << 25):
    """A well-formed safetensors file whose one tensor, d2t, claims ``entries`` int64 (sparse: no disk used)."""
    header = json.dumps({"d2t": {"dtype": "I64", "shape": [entries], "data_offsets": [0, entries * 8]}}).encode()
    path.unlink()
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + entries * 8)


READERS = {  # the file the report reads -> (where, how to make it hostile)
    "draft config.json": ("draft", "config.json"),
    "draft tokenizer.json": ("draft", "tokenizer.json"),
    "target config.json": ("target", "config.json"),
    "target tokenizer.json": ("target", "tokenizer.json"),
    "draft d2t tensor": ("draft", "model.safetensors"),
}


def test_the_plain_case_reads_everything(tmp_path):
    d, t = _dirs(tmp_path)
    facts = sr.read_draft_facts(str(d), str(t))
    assert facts.unread == () and facts.config and facts.target_config and facts.tokenizer == facts.target_tokenizer


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("hostile", ["sparse 256 MiB", "fifo"])
def test_every_report_read_is_bounded_and_named_when_left_out(tmp_path, reader, hostile):
    d, t = _dirs(tmp_path)
    where, name = READERS[reader]
    path = (d if where == "draft" else t) / name
    if hostile == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif name == "model.safetensors":
        _sparse_d2t(path)
    else:
        _sparse(path)
    tracemalloc.start()
    try:
        facts = bounded(lambda: sr.read_draft_facts(str(d), str(t)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak} bytes allocated reading the facts"
    assert any(str(path) in u for u in facts.unread), facts.unread  # left out, and said so
    report = sr.build(sr.SetupFacts(releases.newest(), {}, {}, draft=facts))
    assert report.unread == list(facts.unread) and any(line.startswith("  not read: ") for line in report.lines())


def test_no_server_side_module_reads_a_file_but_through_userfiles():
    """Every read of a user's file in core/ and observe/ goes through core/userfiles.py (bounded, regular files):
    no builtin open(), Path.read_text() or Path.read_bytes() anywhere else; the one listed exception reads SGLang's
    own sources, not a user's file."""
    allowed = {("sglang_report.py", "read_text")}  # locate: SGLang's installed argument sources
    found = []
    for path in SERVER_SIDE:
        if path.name == "userfiles.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) and f.attr in ("read_text", "read_bytes") else \
                "open" if isinstance(f, ast.Name) and f.id == "open" else None
            if name and (path.name, name) not in allowed:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {name}()")
    assert found == []


# --- 2. the dump is private --------------------------------------------------------------------------------------


def _tree(root):
    return sorted((str(p.relative_to(root)), p.is_symlink() or p.is_dir() or p.stat().st_size) for p in root.rglob("*"))


def _hostile_dir(kind, tmp_path):
    p = tmp_path / "dump"
    if kind == "symlink to a directory":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        p.symlink_to(tmp_path / "elsewhere")
    elif kind == "dangling symlink":
        p.symlink_to(tmp_path / "nowhere")
    elif kind in ("group-writable", "world-writable", "world-writable and sticky"):
        p.mkdir()
        os.chmod(p, {"group-writable": 0o770, "world-writable": 0o777, "world-writable and sticky": 0o1777}[kind])
    elif kind == "owned by another user":
        if os.geteuid() != 0:
            pytest.skip("only root can give a directory to another user")
        p.mkdir(mode=0o700)
        os.chown(p, 65534, 65534)
    elif kind == "a file":
        p.write_text("x")
    elif kind == "a fifo":
        os.mkfifo(p)
    return p


HOSTILE_DIRS = ["symlink to a directory", "dangling symlink", "group-writable", "world-writable",
                "world-writable and sticky", "owned by another user", "a file", "a fifo"]


@pytest.mark.parametrize("kind", HOSTILE_DIRS)
def test_a_hostile_dump_directory_is_refused_and_nothing_is_written(tmp_path, kind, caplog):
    p = _hostile_dir(kind, tmp_path)
    before = _tree(tmp_path)
    with pytest.raises(InputError) as e:
        bounded(lambda: PrivateDirectory.open(p))
    assert (e.value.file, e.value.field) == (str(p), "<dir>")
    # the dump: off for this process with one ERROR naming the directory and the variable; serving goes on
    assert bounded(lambda: dump.dump_from_env({"tp_rank": 0}, environ={dump.ENV_DIR: str(p)})) is None
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and str(p) in errors[0] and dump.ENV_DIR in errors[0]
    # the setup report that would go into it: not written (one WARNING), serving goes on
    sglang_report._write(_report(), {dump.ENV_DIR: str(p)})
    assert _tree(tmp_path) == before


def _report():
    return sr.SetupReport("0.5.23", "test", [], {}, [], [])


def test_an_existing_private_directory_of_this_user_is_used(tmp_path):
    p = tmp_path / "dump"
    p.mkdir(mode=0o755)  # readable by others is the user's choice; the files are 0600 all the same
    d = dump.dump_from_env({"tp_rank": 0}, environ={dump.ENV_DIR: str(p)})
    d(torch.ones(2, 6), torch.zeros(2, dtype=torch.long), torch.arange(2))
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in p.iterdir()) and len(list(p.iterdir())) == 2


def test_the_report_in_the_dump_directory_is_private(tmp_path):
    old = os.umask(0)
    try:
        sglang_report._write(_report(), {dump.ENV_DIR: str(tmp_path / "d")})
    finally:
        os.umask(old)
    path = sr.report_path({dump.ENV_DIR: str(tmp_path / "d")})
    assert json.loads(path.read_text())["changes_read_from"] == "test"
    assert [stat.S_IMODE(p.stat().st_mode) for p in (path.parent.parent, path.parent, path)] == [0o700, 0o700, 0o600]


def test_writes_stay_in_the_directory_opened_at_start(tmp_path):
    p = tmp_path / "dump"
    d = dump.CaptureDump(p, metadata={"tp_rank": 0}, max_batches=3)
    d(torch.ones(2, 6), torch.zeros(2, dtype=torch.long), torch.arange(2))
    p.rename(tmp_path / "moved")
    (tmp_path / "trap").mkdir()
    p.symlink_to(tmp_path / "trap")  # a link planted at the path after start
    d(torch.ones(2, 6), torch.zeros(2, dtype=torch.long), torch.arange(2))
    assert not d.disabled and list((tmp_path / "trap").iterdir()) == []
    assert len(list((tmp_path / "moved").glob("*.safetensors"))) == 2


FULL_DISK = """
import resource, signal, sys
import torch
from sglang_eagle3_capture.observe.dump import CaptureDump
d = CaptureDump(sys.argv[1], metadata={"tp_rank": 0}, max_batches=4)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as one on a full disk fails
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # the metadata fits, the tensors do not
for _ in range(2):
    d(torch.ones(64, 64), torch.zeros(64, dtype=torch.long), torch.arange(64))
print("disabled", d.disabled)
"""


def test_a_full_disk_leaves_no_batch_metadata_without_its_tensors(tmp_path):
    p = tmp_path / "dump"
    out = subprocess.run([sys.executable, "-c", FULL_DISK, str(p)], env=subprocess_env(), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "disabled True" in out.stdout, out.stderr[-3000:]
    assert sorted(os.listdir(p)) == []  # no .json without its .safetensors, no temporary file
    assert out.stderr.count("eagle3-capture dump: cannot write a batch") == 1, out.stderr[-3000:]


def test_a_blank_dump_path_writes_nothing_anywhere(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    env = {dump.ENV_DIR: "  \t "}
    assert dump.dump_from_env({"tp_rank": 0}, environ=env) is None
    assert sr.report_path(env) is None
    sglang_report._write(_report(), env)
    assert list(tmp_path.iterdir()) == []
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and dump.ENV_DIR in warnings[0]


# --- 2. every log line escapes what users control ----------------------------------------------------------------

LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def _log_calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            for g in ([f.body, f.orelse] if isinstance(f, ast.IfExp) else [f]):
                if isinstance(g, ast.Attribute) and g.attr in LEVELS and isinstance(g.value, ast.Name):
                    yield node, g.value.id


def _logger_modules():
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        calls = list(_log_calls(tree))
        if any(owner == "logger" for _, owner in calls):
            out.append((path, tree, calls))
    return out


@pytest.mark.parametrize("path, tree, calls", _logger_modules(), ids=lambda x: str(x.relative_to(PACKAGE))
                         if isinstance(x, Path) else "")
def test_every_log_line_is_formed_one_way(path, tree, calls):
    """Every module that logs makes its logger with core.logs.get_logger (the escaping filter), and every call site
    passes a constant format string with no control character: user values travel as arguments only."""
    made = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "logger" for t in n.targets)]
    assert len(made) == 1 and isinstance(made[0].value, ast.Call) and \
        getattr(made[0].value.func, "id", None) == "get_logger", f"{path.name}: logger not made by get_logger"
    for node, owner in calls:
        assert owner == "logger", f"{path.name}:{node.lineno}: logs through {owner}, not the module's logger"
        fmt = node.args[0] if node.args else None
        assert isinstance(fmt, ast.Constant) and isinstance(fmt.value, str), f"{path.name}:{node.lineno}"
        assert fmt.value.isprintable(), f"{path.name}:{node.lineno}: a control character in the format string"


def test_no_logger_is_made_any_other_way():
    made = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "getLogger" and node.args:
                name = node.args[0]
                if isinstance(name, ast.Constant) and not str(name.value).startswith("sglang_eagle3_capture"):
                    continue  # another library's logger, read (the preflight collects SGLang's notes), not ours
                made.add(str(path.relative_to(PACKAGE)))
    assert made == {"core/logs.py"}  # (the command line's getLogger() with no name is the root, read, never logged to)


def _module_name(path):
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


@pytest.mark.parametrize("path", [p for p, _, _ in _logger_modules()], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_each_logger_escapes_a_hostile_value_into_one_line(path):
    import importlib

    logger = importlib.import_module(_module_name(path)).logger
    stream = __import__("io").StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.warning("eagle3-capture: draft %s: %r; %d", HOSTILE, {"k": HOSTILE}, 3)
        logger.info(HOSTILE)  # a message with no arguments is escaped too
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and all(line.isprintable() for line in lines), lines
    assert "\\x1b[2K\\r\\neagle3-capture self-check passed" in lines[0] and lines[0].endswith("; 3")


def test_a_hostile_draft_directory_name_forges_no_line_through_the_resolution(tmp_path, caplog):
    draft = tmp_path / HOSTILE
    shutil.copytree(TINY / "draft", draft)
    (draft / MANIFEST_FILENAME).unlink()  # no manifest: the stock wiring WARNING names the draft directory
    cfg = json.loads((TINY / "target" / "config.json").read_text())
    eagle3 = SimpleNamespace(name="EAGLE3", is_eagle=lambda: True, is_eagle3=lambda: True, is_standalone=lambda: False)
    with caplog.at_level(logging.INFO):
        assert resolution.resolve_target_capture(
            config=SimpleNamespace(eagle_use_aux_hidden_state=True), server_args=SimpleNamespace(pp_size=1),
            model_config=SimpleNamespace(hf_config=cfg), spec_algorithm=eagle3, is_draft_worker=False,
            draft_path=str(draft), draft_hf_config=lambda: json.loads((draft / "config.json").read_text())) is None
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.isprintable() and "running stock wiring" in warning
    assert "self-check passed" in warning and "\\n" in warning  # there, escaped, on the one line


# --- 3. one parser for every switch ------------------------------------------------------------------------------

GOOD = {switches.FLAG: [("1", True), ("TRUE", True), (" yes ", True), ("On", True), ("0", False), ("OFF", False),
                        ("false", False), ("no", False)],
        switches.INT: [("7", 7)], switches.FLOAT: [("0.25", 0.25)], switches.PATH: [(" /x/y ", "/x/y")]}
JUNK = {switches.FLAG: ["maybe", "2", "enable", "tru"], switches.INT: ["four", "1.5", "-1", "64MiB", "1e3"],
        switches.FLOAT: ["two", "nan", "inf", "-0.5", "1.5"], switches.PATH: ["   ", "\t", "a\x00b"]}


def _cases():
    for s in switches.SWITCHES:
        for raw, value in GOOD[s.kind]:
            if s.kind in (switches.INT, switches.FLOAT) and not s.low <= value <= (s.high or value):
                continue
            yield s, raw, value
        for raw in JUNK[s.kind]:
            if s.kind == switches.INT and raw == "-1" and s.low < 0:
                continue
            yield s, raw, None


@pytest.mark.parametrize("switch, raw, value", list(_cases()), ids=lambda x: x.name if isinstance(x, switches.Switch)
                         else repr(x))
def test_every_switch_follows_the_one_rule(switch, raw, value):
    env = {switch.name: raw}
    assert switches.parse(switch, {}) == (switch.default, None) == switches.parse(switch, {switch.name: ""})
    if value is not None:
        assert switches.parse(switch, env) == (value, None)
    elif switch.guards:  # a guarantee: refused, naming the variable
        with pytest.raises(DeploymentError) as e:
            switches.parse(switch, env)
        assert (e.value.file, e.value.field) == (None, switch.name) and switch.name in e.value.fix
    else:  # its default, and one problem naming the variable and the fix
        got, problem = switches.parse(switch, env)
        assert got == switch.default and problem.startswith(f"{switch.name}=") and "fix:" in problem


def test_the_guards_are_the_switches_whose_off_state_loosens_a_guarantee():
    assert {s.name for s in switches.SWITCHES if s.guards} == {switches.STRICT.name, switches.SELFCHECK.name}


def test_every_variable_the_package_names_is_a_declared_switch():
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(re.findall(r"SGLANG_EAGLE3_CAPTURE_[A-Z_]*[A-Z]", path.read_text()))
    assert named == {s.name for s in switches.SWITCHES}


def test_the_docs_list_every_switch_with_its_rule():
    text = (REPO / "docs" / "how-it-works.md").read_text()
    section = text[text.index("## Environment switches"):]
    section = section[:section.index("\n## ", 3)]
    for s in switches.SWITCHES:
        row = next((line for line in section.splitlines() if line.startswith(f"| `{s.name}`")), None)
        assert row is not None, s.name
        assert f"| {s.shown_default()} |" in row.replace("`", "") and ("refused" in row) == s.guards, row


def test_every_consumer_reads_through_the_parser(tmp_path, caplog):
    """The junk values of the issue, at each place a switch is consumed."""
    for maybe in ("maybe", "2"):
        with pytest.raises(DeploymentError) as e:
            sr.strict({switches.STRICT.name: maybe})
        assert e.value.field == switches.STRICT.name
        with pytest.raises(DeploymentError) as e:
            selfcheck.enabled({switches.SELFCHECK.name: maybe})
        assert e.value.field == switches.SELFCHECK.name
    assert acceptance.Settings.from_environ({switches.METRICS.name: "OFF"}).enabled is False
    s = acceptance.Settings.from_environ({switches.METRICS.name: "maybe"})
    assert s.enabled is True and len(s.problems) == 1 and switches.METRICS.name in s.problems[0]
    d = dump.dump_from_env({"tp_rank": 0}, environ={dump.ENV_DIR: str(tmp_path / "d"), dump.ENV_MAX_BATCHES: "x"})
    assert d.max_batches == switches.DUMP_MAX.default


@pytest.mark.parametrize("name", [switches.STRICT.name, switches.SELFCHECK.name])
def test_a_guard_that_does_not_read_refuses_the_target_at_startup(monkeypatch, name):
    """The resolution seam (every target ModelRunner, before its model loads) refuses before SGLang's own code runs;
    a draft worker is not a separate refusal."""
    ran = []
    seam = target_patch._wrap_resolve(lambda runner: ran.append(runner))
    monkeypatch.setenv(name, "maybe")
    with pytest.raises(DeploymentError) as e:
        seam(SimpleNamespace(is_draft_worker=False))
    assert e.value.field == name and ran == []


# --- 4. the ranks' statements must agree ---------------------------------------------------------------------------

M = Manifest((5, -1, 1), "DeepseekV3ForCausalLM", 6, 64, {"source": "manual"}, path=Path("/d/eagle3_manifest.json"))


def _changed(field):
    values = {"layer_ids": (-1, 1, 5), "target_architecture": "LlamaForCausalLM", "target_num_hidden_layers": 7,
              "target_hidden_size": 32, "provenance": {"source": "manual", "note": "edited"},
              "expected": {"per_setting": []}}
    kw = {f: getattr(M, f) for f in ("layer_ids", "target_architecture", "target_num_hidden_layers",
                                     "target_hidden_size", "provenance", "expected")}
    kw[field] = values[field]
    return Manifest(**kw)


@pytest.mark.parametrize("field", ["layer_ids", "target_architecture", "target_num_hidden_layers",
                                   "target_hidden_size", "provenance", "expected"])
def test_the_manifest_digest_covers_every_field(field):
    other = _changed(field)
    assert ranks.manifest_digest(other) != ranks.manifest_digest(M)
    assert ranks.manifest_digest(Manifest(M.layer_ids, M.target_architecture, 6, 64, dict(M.provenance))) == \
        ranks.manifest_digest(M)  # the path is not part of what is served


FILE = str(M.path)
SAME = ranks.statement(M.layer_ids, FILE, "layer_ids", M)
DIFFERENT = {
    "other layer ids": ranks.statement((-1, 1, 5), FILE, "layer_ids", M),
    "an edited manifest": ranks.statement(M.layer_ids, FILE, "layer_ids", _changed("provenance")),
    "no manifest (stock wiring)": ranks.statement(None, stock=[0, 2, 5]),
    "another source": ranks.statement(M.layer_ids, "/e/config.json", "eagle_config.x", M),
}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_ranks_that_agree_pass(n):
    ranks.check([json.loads(json.dumps(SAME))] * n)  # as gathered: copies that went through pickling


@pytest.mark.parametrize("case", DIFFERENT)
@pytest.mark.parametrize("odd_rank", [0, 1, 3])
def test_any_rank_that_differs_refuses_the_deployment_on_every_rank(case, odd_rank):
    statements = [SAME] * 4
    statements[odd_rank] = DIFFERENT[case]
    with pytest.raises(DeploymentError) as e:
        ranks.check(statements)
    first = statements[0] if statements[0]["file"] else statements[1]  # the first rank that declares
    assert (e.value.file, e.value.field) == (first["file"], first["field"])
    assert f"rank {odd_rank}:" in e.value.problem  # the odd one out, named


def test_ranks_agree_states_what_this_process_serves(monkeypatch):
    """core/sglang/target.ranks_agree: the declared ids and the manifest this process's resolution recorded (the
    gather itself is SGLang's TP CPU group: tests/engine/test_ranks_agree_engine.py)."""
    seen = []
    monkeypatch.setattr(target_patch, "tp_all_gather", lambda mine: seen.append(mine) or [
        mine, DIFFERENT["other layer ids"]])
    monkeypatch.setattr(resolution, "_RECORD", [resolution.Resolution("/d", Path("/d"), M)])
    declared = resolution.DeclaredLayerIds(M.layer_ids, FILE, "layer_ids")
    with pytest.raises(DeploymentError) as e:
        target_patch.ranks_agree(declared)
    assert seen == [SAME] and (e.value.file, e.value.field) == (FILE, "layer_ids")
    monkeypatch.setattr(target_patch, "tp_all_gather", lambda mine: [mine, mine])
    target_patch.ranks_agree(declared)
    target_patch.ranks_agree([0, 2, 4])  # stock wiring on every rank: agreed
