"""Every read and write of a file the user gave or will use: reads never block on a special file and are bounded,
JSON is strict (UTF-8, no duplicate keys, NaN or lone surrogates), writes are atomic, every ``OSError`` becomes an
``InputError``; docs/threat-model.md lists each guarantee and its test."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import shutil
import stat
from pathlib import Path
from typing import Any, Iterator

from .errors import InputError, brief, cut, shown

MAX_JSON_BYTES = 64 << 20  # a config, manifest, index or sample index; the largest real ones are a few MB
TEMP_DIR_PREFIX = ".sglang-eagle3-capture."  # temporary directories of atomic_directory: PREFIX + random
_KIND_NAMES = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
_CREATE = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # may start a lone surrogate; a valid pair passes the check
PRIVATE_DIR_MODE, PRIVATE_FILE_MODE = 0o700, 0o600
_REPLACE_FIX = ("point it at a new path (it is created 0700), or at a directory this user owns that no one else can "
                "write")
_OS_PROBLEMS = {  # errno -> (problem, fix) for a user's file; EACCES/EPERM depend on reading or writing
    errno.ENOSPC: ("no space left on device", "free space on that file system, or write somewhere else"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota, or write somewhere else"),
    errno.EFBIG: ("file too large for this file system or process limit", "write somewhere else, or raise the limit"),
    errno.EROFS: ("read-only file system", "write somewhere else"),
    errno.ELOOP: ("symlink loop", "point the symlink at a real file"),
    errno.EISDIR: ("is a directory", "name the file, not a directory"),
    errno.ENOTDIR: ("a component of the path is not a directory", "check the path"),
    errno.ENAMETOOLONG: ("file name too long", "use a shorter name"),
    errno.ENOENT: ("no such file or directory", "check the path"),
    errno.EXDEV: ("crosses file systems", "write within one file system"),
}


def os_problem(e: OSError, *, writing: bool = False) -> tuple[str, str]:
    if e.errno in (errno.EACCES, errno.EPERM):
        what = "writable" if writing else "readable"
        return "permission denied", f"make it (and the directories above it) {what} by this user"
    return _OS_PROBLEMS.get(e.errno) or (f"{e.strerror or type(e).__name__} (errno {e.errno})",
                                         "check the file and the file system")


def os_error(path: Any, field: str, doing: str, e: OSError, *, writing: bool = False,
             fix: str | None = None) -> InputError:
    """The ``InputError`` for ``e`` raised while ``doing`` (e.g. "cannot read") at ``path``."""
    problem, how = os_problem(e, writing=writing)
    return InputError(path, field, f"{doing} ({problem})", fix or how)


def path_kind(path: str | os.PathLike, *, fix: str | None = None) -> str:
    """What ``path`` is after symlinks: file, directory, missing, dangling symlink, symlink loop, or a fifo etc."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError) as e:
        return "dangling symlink" if isinstance(e, FileNotFoundError) and os.path.lexists(path) else "missing"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symlink loop"
        if e.errno == errno.ENAMETOOLONG:
            raise InputError(path, "<file>", "file name too long", "use a shorter path") from None
        problem, how = os_problem(e)
        raise InputError(path, "<file>", f"cannot be looked at ({problem})",
                         how if fix is None else f"{how}, or {fix}") from None
    kind = stat.S_IFMT(st.st_mode)
    return {stat.S_IFREG: "file", stat.S_IFDIR: "directory"}.get(kind) or _KIND_NAMES.get(kind, "not a regular file")


def _not_a_file(kind: str, path: Any) -> str:
    if kind == "dangling symlink":
        try:
            return f"is a dangling symlink (to {shown(os.readlink(path))!r})"
        except OSError:
            return "is a dangling symlink"
    fixed = {"directory": "is a directory, not a file", "symlink loop": "is a symlink loop"}
    return fixed.get(kind, f"is {kind}, not a regular file")


def is_file(path: str | os.PathLike, *, fix: str = "check the path") -> bool:
    """True for a regular file, False when nothing is there; ``InputError`` for anything else that stands there."""
    kind = path_kind(path, fix=fix)
    if kind not in ("file", "missing"):
        raise InputError(path, "<file>", _not_a_file(kind, path), fix)
    return kind == "file"


def require_file(path: str | os.PathLike, *, fix: str, missing: str = "not found") -> None:
    if not is_file(path, fix=fix):
        raise InputError(path, "<file>", missing, fix)


def is_directory(path: str | os.PathLike, *, fix: str = "check the path") -> bool:
    return path_kind(path, fix=fix) == "directory"


def list_directory(path: str | os.PathLike, *, fix: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        raise os_error(path, "<dir>", "cannot list the directory", e,
                      fix=fix if e.errno == errno.ENOENT else None) from None


def open_regular(path: str | os.PathLike, *, fix: str, missing: str = "not found"):
    """``path`` opened for binary reading, only if it is a regular file; never blocks on a special file."""
    require_file(path, fix=fix, missing=missing)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise os_error(path, "<file>", "cannot open", e) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else between stat and open
            raise InputError(path, "<file>", "is not a regular file", fix)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, *, fix: str, missing: str = "not found",
               max_bytes: int = MAX_JSON_BYTES) -> bytes:
    with open_regular(path, fix=fix, missing=missing) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise InputError(path, "<file>", f"is {size} bytes, more than the {max_bytes} this reader accepts", fix)
            data = f.read(size + 1)  # not max_bytes + 1: read(n) allocates n bytes before it reads
            if len(data) > size:  # it grew since fstat (or the kernel reports no size): read on, still bounded
                data += f.read(max_bytes + 1 - len(data))
        except OSError as e:
            raise os_error(path, "<file>", "cannot read", e) from None
    if len(data) > max_bytes:
        raise InputError(path, "<file>", f"holds more than the {max_bytes} bytes this reader accepts", fix)
    return data


class _Refused(ValueError):
    """``(field, problem)`` of a JSON document refused while it was parsed."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(key, "given twice (duplicate key)")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Refused("<document>", f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _Refused("<document>", f"the number {cut(text, 40)} is out of range")
    return value


def parse_json(data: bytes, *, where: Any, fix: str) -> Any:
    if data.startswith(b"\xef\xbb\xbf"):
        raise InputError(where, "<document>", "starts with a UTF-8 byte-order mark", f"save it without one; {fix}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(where, "<document>", f"not valid UTF-8 (byte {e.start})", fix) from None
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
        if _SURROGATE_ESCAPE.search(text):
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except _Refused as e:
        field, problem = e.args
        raise InputError(where, field, problem, fix) from None
    except json.JSONDecodeError as e:
        raise InputError(where, "<document>", f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})",
                         fix) from None
    except UnicodeEncodeError:
        raise InputError(where, "<document>", "a string holds a lone surrogate such as \\ud800 (not valid Unicode)",
                         fix) from None
    except RecursionError:
        raise InputError(where, "<document>", "nested too deeply (past Python's recursion limit)", fix) from None
    except ValueError as e:  # json.loads: an integer of more digits than sys.get_int_max_str_digits()
        raise InputError(where, "<document>", f"not valid JSON here ({brief(str(e), 80)})", fix) from None
    return doc


def read_json_object(path: str | os.PathLike, *, fix: str, missing: str = "not found") -> dict:
    path = Path(path)
    doc = parse_json(read_bytes(path, fix=fix, missing=missing), where=path, fix=fix)
    if not isinstance(doc, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", int: "an integer", float: "a number"}.get(
            type(doc), "null")
        raise InputError(path, "<document>", f"expected a JSON object, got {kind}", fix)
    return doc


def fsync_directory(path: str | os.PathLike) -> None:
    """Make a rename or a new entry in directory ``path`` durable (best effort where directories cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temp_file(directory: Path, name: str, mode: int = 0o666, dir_fd: int | None = None) -> tuple[int, Path]:
    """A new file ``.NAME.<random>.tmp`` in ``directory`` (relative to ``dir_fd``), created ``mode`` less the umask."""
    tmp = directory / f".{name[:64]}.{secrets.token_hex(8)}.tmp"
    return os.open(tmp, _CREATE, mode, dir_fd=dir_fd), tmp


def _replace(path: Path, data: bytes | str, *, mode: int, dir_fd: int | None = None) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it and rename it onto ``path``; raises ``OSError``."""
    fd, tmp = _temp_file(path.parent, path.name, mode, dir_fd)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_file_atomic(path: str | os.PathLike, data: bytes | str, *, fix: str | None = None) -> Path:
    """Write ``data`` to ``path`` atomically; anything but a regular file standing at ``path`` is refused."""
    path = Path(path)
    kind = path_kind(path)
    if kind not in ("file", "missing"):
        raise InputError(path, "<file>", _not_a_file(kind, path), fix or "remove it, or write elsewhere")
    try:
        _replace(path, data, mode=0o666)
    except OSError as e:
        raise os_error(path, "<file>", "cannot write", e, writing=True, fix=fix) from None
    fsync_directory(path.parent)
    return path


class PrivateDirectory:
    """A directory (created 0700, or owned by this user and writable by no one else) held open ``O_NOFOLLOW``; files
    (0600) are written through its descriptor, so a path replaced later never redirects a write (the dump's prompts)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    @classmethod
    def open(cls, path: str | os.PathLike) -> "PrivateDirectory":
        path = Path(path)
        try:
            os.makedirs(path.parent, exist_ok=True)
        except OSError as e:  # FileExistsError: something other than a directory stands above it
            code = errno.ENOTDIR if isinstance(e, FileExistsError) else e.errno
            raise os_error(path, "<dir>", "cannot create the directory", OSError(code, e.strerror),
                          writing=True) from None
        return cls(_open_private(str(path), None, path), path)

    def subdirectory(self, name: str) -> "PrivateDirectory":
        return PrivateDirectory(_open_private(name, self.fd, self.path / name), self.path / name)

    def write(self, name: str, data: bytes | str) -> Path:
        try:
            _replace(Path(name), data, mode=PRIVATE_FILE_MODE, dir_fd=self.fd)
            os.fsync(self.fd)
        except OSError as e:
            raise os_error(self.path / name, "<file>", "cannot write", e, writing=True) from None
        return self.path / name

    def remove(self, name: str) -> None:
        """Remove file ``name`` if it is there (best effort)."""
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "PrivateDirectory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _open_private(name: str, dir_fd: int | None, path: Path) -> int:
    try:
        os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=dir_fd)
    except FileExistsError:
        pass  # checked below, as any existing directory
    except OSError as e:
        raise os_error(path, "<dir>", "cannot create the directory", e, writing=True) from None
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise InputError(path, "<dir>", f"is a symlink (to {shown(os.readlink(name, dir_fd=dir_fd))!r}): a link "
                             "planted there would send what is written to a place of someone else's choosing",
                             _REPLACE_FIX)
        if not stat.S_ISDIR(st.st_mode):
            kind = _KIND_NAMES.get(stat.S_IFMT(st.st_mode), "a file")
            raise InputError(path, "<dir>", f"is {kind}, not a directory", _REPLACE_FIX)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        raise os_error(path, "<dir>", "cannot open the directory", e) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):  # swapped between the look and the open
            raise InputError(path, "<dir>", "is not a directory", _REPLACE_FIX)
        if st.st_uid != os.geteuid():
            raise InputError(path, "<dir>", f"is owned by uid {st.st_uid}, not by this process's user (uid "
                             f"{os.geteuid()}): its owner could read or replace what is written there", _REPLACE_FIX)
        if st.st_mode & 0o022:
            who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
            fix = (f"point it at a new directory inside it, e.g. {cut(str(path / 'eagle3-dump'), 200, keep_end=True)}"
                   " (created 0700)" if st.st_mode & stat.S_ISVTX else  # a shared directory such as /tmp
                   f"chmod go-w {cut(str(path), 200, keep_end=True)}, or {_REPLACE_FIX}")
            raise InputError(path, "<dir>", f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}): they could "
                             "replace or remove what is written there", fix)
        return fd
    except BaseException:
        os.close(fd)
        raise


def finish_file(path: str | os.PathLike) -> None:
    """Give a file a library wrote (safetensors: 0600) the mode a new file there gets (umask or default ACL), fsync."""
    path = Path(path)
    try:
        fd, probe = _temp_file(path.parent, path.name)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
        finally:
            os.close(fd)
            os.unlink(probe)
        os.chmod(path, mode)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise os_error(path, "<file>", "cannot write", e, writing=True) from None


@contextlib.contextmanager
def atomic_directory(dst: str | os.PathLike) -> Iterator[Path]:
    """Yield a hidden directory renamed onto ``dst`` (missing or empty) on a normal exit, removed on an exception."""
    dst = Path(dst)
    parent = dst.parent
    tmp: Path | None = parent / f"{TEMP_DIR_PREFIX}{secrets.token_hex(8)}"
    try:
        os.mkdir(tmp, 0o777)
    except OSError as e:
        raise os_error(parent, "<dir>", "cannot create a directory there", e, writing=True) from None
    try:
        yield tmp
        try:
            fsync_directory(tmp)
            os.rename(tmp, dst)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise InputError(dst, "<dir>", "appeared with files in it while this command wrote its copy (another "
                                 "process wrote it)", "choose a new destination, or remove it and run again") from None
            if e.errno == errno.ENOTDIR:
                raise InputError(dst, "<dir>", "a file appeared there while this command wrote its copy",
                                 "choose a new destination") from None
            if e.errno == errno.EBUSY:  # a mount point (or a directory in use) cannot be renamed over
                raise InputError(dst, "<dir>", "is a mount point or in use, so the finished copy cannot be renamed "
                                 "onto it", f"write into a new directory inside it, e.g. "
                                 f"{brief(str(dst / 'draft'), 200)}") from None
            raise os_error(dst, "<file>", "cannot write", e, writing=True) from None
        tmp = None
        fsync_directory(parent)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
