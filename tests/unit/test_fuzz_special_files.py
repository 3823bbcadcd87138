"""Every place a user file is read, with something other than a regular file standing there.

Kinds: a directory, a fifo (a read would block forever), a socket, a symlink to a character device (/dev/zero), a
symlink loop, a dangling symlink, and (as an unprivileged user: root reads anything) a file without read permission.
Each must end in exit 2 with one line naming the file and ``fix:``, without blocking (a watchdog unblocks a reader
stuck on a fifo, and the time bound then fails the case).
"""

import os
import shutil
import socket
from pathlib import Path

import pytest

from support.hostile_inputs import (
    Ctx,
    M,
    compare,
    convert,
    inspect,
    problems,
    run_as_user,
    run_cli,
    shared_base,
    show,
    verify,
    world_readable_dir,
    write,
)

pytestmark = pytest.mark.fuzz  # real processes on special files: make quick leaves them out

KINDS = ("directory", "fifo", "socket", "device", "symlink loop", "dangling symlink")


def _draft(c: Ctx, rel: str):
    d = c.cp("tiny/draft", "draft")
    return d, d / rel


def _index(c: Ctx):
    d = c.cp("tiny/draft", "draft")
    (d / "model.safetensors").rename(d / "model-00001-of-00001.safetensors")
    from support.hostile_inputs import st_read

    header, _ = st_read(d / "model-00001-of-00001.safetensors")
    (d / "model.safetensors.index.json").write_text(
        '{"weight_map": {' + ", ".join(f'"{n}": "model-00001-of-00001.safetensors"' for n in header
                                      if n != "__metadata__") + "}}")
    return d


def _samples(c: Ctx, sub="tiny/samples", as_="samples"):
    return c.cp(sub, as_)


# position -> (the file that gets replaced, the command), built in a case directory
POSITIONS = {
    "manifest": lambda c: (lambda d, f: (f, show(d)))(*_draft(c, M)),
    "draft config.json": lambda c: (lambda d, f: (f, inspect(d)))(*_draft(c, "config.json")),
    "target config.json": lambda c: (c.cp("tiny/target", "target") / "config.json",
                                     write(c.cp("tiny/draft", "draft"), c.p("target"))),
    "--target file": lambda c: (c.p("t.json"), write(c.cp("tiny/draft", "draft"), c.p("t.json"))),
    "draft weights": lambda c: (lambda d, f: (f, write(d, c.b("tiny/target"))))(*_draft(c, "model.safetensors")),
    "shard index": lambda c: (lambda d: (d / "model.safetensors.index.json", write(d, c.b("tiny/target"))))(_index(c)),
    "shard": lambda c: (lambda d: (d / "model-00001-of-00001.safetensors", write(d, c.b("tiny/target"))))(_index(c)),
    "weights for verify": lambda c: (lambda d, f: (f, verify(d, c.b("tiny/samples/data_0.pt"))))(
        *_draft(c, "model.safetensors")),
    "target weights": lambda c: (c.cp("tiny/target", "target") / "model.safetensors",
                                 verify(c.b("tiny/draft"), c.b("tiny/samples/data_0.pt"),
                                        extra=["--target", str(c.p("target"))])),
    "sample in a directory": lambda c: (_samples(c) / "data_99.pt", verify(c.b("tiny/draft"), c.p("samples"))),
    "sample on the command line": lambda c: (c.p("data_0.pt"), verify(c.b("tiny/draft"), c.p("data_0.pt"))),
    "sample_lengths.json": lambda c: (_samples(c) / "sample_lengths.json", verify(c.b("tiny/draft"), c.p("samples"))),
    "data_config.json": lambda c: (_samples(c) / "data_config.json", verify(c.b("tiny/draft"), c.p("samples"))),
    "hs sample": lambda c: (_samples(c, "hs", "hs") / "hs_9.safetensors", verify(c.b("tiny/draft"), c.p("hs"))),
    "ckpt.gz sample": lambda c: (_samples(c, "ckgz", "ckgz") / "data_9.ckpt.gz", verify(c.b("tiny/draft"),
                                                                                          c.p("ckgz"))),
    "dump batch": lambda c: (c.cp("dump", "dump") / "x.safetensors", compare(c.p("dump"), c.b("tiny/samples"))),
    "dump metadata": lambda c: (lambda d: (sorted(d.glob("*.json"))[0], compare(d, c.b("tiny/samples"))))(
        c.cp("dump", "dump")),
    "--dump": lambda c: (c.p("dump"), compare(c.p("dump"), c.b("tiny/samples"))),
    "convert SRC config.json": lambda c: (c.cp("spec_draft", "src") / "config.json",
                                          convert(c.p("src"), c.p("out"), c.b("kimi"))),
    "convert SRC weights": lambda c: (c.cp("spec_draft", "src") / "model.safetensors",
                                      convert(c.p("src"), c.p("out"), c.b("kimi"))),
}
# a directory is what belongs at these positions: only the other kinds are wrong there
DIRECTORY_POSITIONS = {"--dump"}


def _make(kind: str, path: Path) -> None:
    if path.is_symlink() or path.exists():
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    if kind == "directory":
        path.mkdir()
        (path / "x").write_text("x")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
    elif kind == "device":
        os.symlink("/dev/zero", path)
    elif kind == "symlink loop":
        os.symlink(path.name, path)
    elif kind == "dangling symlink":
        os.symlink(path.with_name("gone"), path)


@pytest.fixture(scope="module")
def base():
    return shared_base()


CASES = [(p, k) for p in POSITIONS for k in KINDS if not (p in DIRECTORY_POSITIONS and k == "directory")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("position, kind", CASES, ids=[f"{p}-{k}" for p, k in CASES])
def test_special_file(base, position, kind):
    d = world_readable_dir("e3c-special-")
    try:
        path, argv = POSITIONS[position](Ctx(base, d))
        _make(kind, path)
        r = run_cli(argv, d)
        found = problems(r, expect=(2,), names=path.name, max_secs=10.0)
        assert not found, f"{position} as {kind}: " + "; ".join(found)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def unreadable_results(base):
    """Every position with a file its reader may not read (mode 000, directories 0o300: not listable), as uid 65534."""
    root = world_readable_dir("e3c-unreadable-")
    runs, names = [], {}
    for position, build in POSITIONS.items():
        d = root / position.replace(" ", "_").replace("-", "")
        d.mkdir()
        path, argv = build(Ctx(base, d))
        if position in ("sample on the command line", "--dump", "--target file"):
            if position == "--dump":
                shutil.copytree(base / "dump", path)
            else:
                shutil.copy(base / ("tiny/samples/data_0.pt" if path.suffix == ".pt" else "tiny/target/config.json"),
                            path)
        elif position in ("dump batch", "sample in a directory", "hs sample", "ckpt.gz sample"):
            src = {"dump batch": sorted((base / "dump").glob("*.safetensors"))[0],
                   "sample in a directory": base / "tiny/samples/data_0.pt",
                   "hs sample": base / "hs/hs_0.safetensors", "ckpt.gz sample": base / "ckgz/data_0.ckpt.gz"}[position]
            shutil.copy(src, path)
        path.chmod(0o300 if path.is_dir() else 0)  # the cases' own files: their owner (us) may not read it
        runs.append((position, argv, d))
        names[position] = path.name
    try:
        yield run_as_user(runs), names
    finally:
        for dirpath, dirnames, _ in os.walk(root):
            for n in dirnames:
                os.chmod(Path(dirpath) / n, 0o755)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("position", list(POSITIONS))
def test_unreadable_file(unreadable_results, position):
    results, names = unreadable_results
    assert not isinstance(results, str), f"cannot run without root's permission bypass here: {results}"
    found = problems(results[position], expect=(2,), names=names[position], max_secs=10.0)
    assert not found, f"{position} unreadable: " + "; ".join(found)
