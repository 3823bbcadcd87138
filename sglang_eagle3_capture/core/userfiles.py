"""The user's files: every read and every write of a file the user gave or will use, in one place.

Reading (:func:`read_json_object`, :func:`open_regular`, :func:`read_bytes`):

- what stands at a path is looked at (``stat``, following symlinks) before anything is opened, so a fifo, a
  socket, a device, a directory, a dangling symlink or a symlink loop is named as such and never opened (no
  read blocks on a special file); files are opened ``O_NONBLOCK`` and checked again with ``fstat``;
- sizes are bounded (:data:`MAX_JSON_BYTES` for JSON documents);
- JSON is read strictly: UTF-8 only (no byte-order mark), duplicate keys refused (``object_pairs_hook``),
  ``NaN``/``Infinity`` and numbers that overflow to infinity refused (``parse_constant``, ``parse_float``), lone
  surrogates (``"\\ud800"``) refused (one encode check, only when the text holds such an escape). Nesting and
  integer size are bounded by ``json.loads`` itself: it raises ``RecursionError`` past the interpreter's recursion
  limit and ``ValueError`` for an integer of more than ``sys.get_int_max_str_digits()`` (4300) digits;
- every ``OSError`` (permission denied, is a directory, symlink loop, no space left...) becomes the caller's
  ``error`` class ``(file, field, problem, fix)``: each function takes ``error=`` for that.

Writing (:func:`write_file_atomic`, :func:`atomic_directory`): a new name in the destination's directory
(``secrets.token_hex``; created ``O_EXCL``, which never follows a symlink), data flushed and fsynced, then renamed
into place and the directory fsynced, so a reader sees the old or the new complete file, never a torn one, and
concurrent writers never collide. Files are created with mode ``0o666`` and directories ``0o777``, so the kernel
applies the umask (or the directory's default ACL), as for a plain ``open()`` / ``mkdir``. A process killed with
``kill -9`` may leave a hidden temporary file or directory behind; any exception removes it.
"""

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

from .errors import InputError, ManifestError, brief, cut, shown

__all__ = ["MAX_JSON_BYTES", "atomic_directory", "finish_file", "fsync_directory", "is_directory", "is_file",
           "list_directory", "open_regular", "os_problem", "parse_json", "path_kind", "read_bytes",
           "read_json_object", "require_file", "write_file_atomic"]

MAX_JSON_BYTES = 64 << 20  # a config, manifest, index or sample index; the largest real ones are a few MB
TEMP_SUFFIX = ".tmp"  # temporary files: ".NAME.<random>.tmp" beside NAME
TEMP_DIR_PREFIX = ".sglang-eagle3-capture."  # temporary directories of atomic_directory: PREFIX + random
_KIND_NAMES = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
_CREATE = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC


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
    """``(problem, fix)`` for an ``OSError`` on a user's file (``writing``: it was being written)."""
    code = e.errno
    if code in (errno.EACCES, errno.EPERM):
        what = "writable" if writing else "readable"
        return "permission denied", f"make it (and the directories above it) {what} by this user"
    if code in _OS_PROBLEMS:
        return _OS_PROBLEMS[code]
    return f"{e.strerror or type(e).__name__} (errno {code})", "check the file and the file system"


# --- what stands at a path -----------------------------------------------------------------------------------------


def path_kind(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str | None = None) -> str:
    """What ``path`` is, following symlinks: ``"file"``, ``"directory"``, ``"missing"``, ``"dangling symlink"``,
    ``"symlink loop"``, or ``"a fifo"`` / ``"a socket"`` / ``"a character device"`` / ``"a block device"``.
    A path that cannot be looked at (a directory above it is not searchable) raises ``error``; its fix is the
    OS problem's own (e.g. make it readable) followed by the caller's ``fix`` when one is given."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        try:
            os.lstat(p)
        except OSError:
            return "missing"
        return "dangling symlink"
    except NotADirectoryError:
        return "missing"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symlink loop"
        if e.errno == errno.ENAMETOOLONG:
            raise error(path, "<file>", "file name too long", "use a shorter path") from None
        problem, how = os_problem(e)
        raise error(path, "<file>", f"cannot be looked at ({problem})",
                    how if fix is None else f"{how}, or {fix}") from None
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    return _KIND_NAMES.get(stat.S_IFMT(st.st_mode), "not a regular file")


def _not_a_file(kind: str, path: Any, missing: str) -> str:
    if kind == "missing":
        return missing
    if kind == "directory":
        return "is a directory, not a file"
    if kind == "dangling symlink":
        try:
            return f"is a dangling symlink (to {shown(os.readlink(path))!r})"
        except OSError:
            return "is a dangling symlink"
    if kind == "symlink loop":
        return "is a symlink loop"
    return f"is {kind}, not a regular file"


def require_file(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str,
                 missing: str = "not found") -> None:
    """Raise ``error`` unless ``path`` is a regular file (after symlinks); ``missing`` says what was not found."""
    kind = path_kind(path, error=error, fix=fix)
    if kind != "file":
        raise error(path, "<file>", _not_a_file(kind, path, missing), fix)


def is_directory(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str = "check the path") -> bool:
    """``Path.is_dir()`` that raises ``error`` instead of ``PermissionError`` for a path it cannot look at."""
    return path_kind(path, error=error, fix=fix) == "directory"


def is_file(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str = "check the path") -> bool:
    """True for a regular file; False when nothing is there; ``error`` for anything else that stands there
    (a directory, fifo, dangling symlink, symlink loop) or a path that cannot be looked at."""
    kind = path_kind(path, error=error, fix=fix)
    if kind == "missing":
        return False
    if kind != "file":
        raise error(path, "<file>", _not_a_file(kind, path, ""), fix)
    return True


def list_directory(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str) -> list[str]:
    """The names in directory ``path``, sorted; a directory that cannot be listed raises ``error``."""
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        problem, how = os_problem(e)
        raise error(path, "<dir>", f"cannot list the directory ({problem})",
                    fix if e.errno == errno.ENOENT else how) from None


# --- reading --------------------------------------------------------------------------------------------------------


def open_regular(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str,
                 missing: str = "not found"):
    """``path`` opened for binary reading, only if it is a regular file; never blocks on a special file."""
    require_file(path, error=error, fix=fix, missing=missing)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        problem, how = os_problem(e)
        raise error(path, "<file>", f"cannot open ({problem})", how) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else between stat and open
            raise error(path, "<file>", "is not a regular file", fix)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str,
               missing: str = "not found", max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of regular file ``path``, refusing files larger than ``max_bytes``."""
    with open_regular(path, error=error, fix=fix, missing=missing) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise error(path, "<file>", f"is {size} bytes, more than the {max_bytes} this reader accepts", fix)
            data = f.read(max_bytes + 1)
        except OSError as e:
            problem, how = os_problem(e)
            raise error(path, "<file>", f"cannot read ({problem})", how) from None
    if len(data) > max_bytes:
        raise error(path, "<file>", f"holds more than the {max_bytes} bytes this reader accepts", fix)
    return data


class _Refused(ValueError):
    """A JSON document refused while it was parsed: ``(field, problem)``."""


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


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # may start a lone surrogate; a valid pair passes the check


def parse_json(data: bytes | str, *, where: Any, error: type[InputError] = InputError, fix: str) -> Any:
    """Parse a JSON document strictly (see the module doc); errors name ``where`` and the field."""
    if isinstance(data, bytes):
        if data.startswith(b"\xef\xbb\xbf"):
            raise error(where, "<document>", "starts with a UTF-8 byte-order mark", f"save it without one; {fix}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise error(where, "<document>", f"not valid UTF-8 (byte {e.start})", fix) from None
    else:
        text = data
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
        if _SURROGATE_ESCAPE.search(text):
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except _Refused as e:
        field, problem = e.args
        raise error(where, field, problem, fix) from None
    except json.JSONDecodeError as e:
        raise error(where, "<document>", f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})",
                    fix) from None
    except UnicodeEncodeError:
        raise error(where, "<document>", "a string holds a lone surrogate such as \\ud800 (not valid Unicode)",
                    fix) from None
    except RecursionError:
        raise error(where, "<document>", "nested too deeply (past Python's recursion limit)", fix) from None
    except ValueError as e:  # json.loads: an integer of more digits than sys.get_int_max_str_digits()
        raise error(where, "<document>", f"not valid JSON here ({brief(str(e), 80)})", fix) from None
    return doc


def read_json_object(path: str | os.PathLike, *, fix: str, missing: str = "not found",
                     error: type[InputError] = ManifestError, max_bytes: int = MAX_JSON_BYTES) -> dict:
    """The JSON object in the file ``path``, read strictly (see the module doc). Anything else raises ``error`` (the
    caller's error class) naming the file, the field and ``fix``; ``missing`` says what was not found."""
    path = Path(path)
    doc = parse_json(read_bytes(path, error=error, fix=fix, missing=missing, max_bytes=max_bytes), where=path,
                     error=error, fix=fix)
    if not isinstance(doc, dict):
        raise error(path, "<document>", f"expected a JSON object, got {_json_type(doc)}", fix)
    return doc


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


# --- writing --------------------------------------------------------------------------------------------------------


def fsync_directory(path: str | os.PathLike) -> None:
    """Make a rename or a new entry in directory ``path`` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_error(error: type[InputError], path: Any, e: OSError, fix: str | None = None) -> InputError:
    problem, how = os_problem(e, writing=True)
    return error(path, "<file>", f"cannot write ({problem})", fix or how)


def _temp_file(directory: Path, name: str) -> tuple[int, Path]:
    """A new file ``.NAME.<random>.tmp`` in ``directory``, created ``0o666`` (the kernel applies the umask)."""
    tmp = directory / f".{name[:64]}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
    return os.open(tmp, _CREATE, 0o666), tmp


def write_file_atomic(path: str | os.PathLike, data: bytes | str, *, error: type[InputError] = InputError,
                      fix: str | None = None, fsync: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (see the module doc); any ``OSError`` raises ``error`` naming the file.

    A directory (or anything but a regular file or nothing) standing at ``path`` is refused, never replaced."""
    path = Path(path)
    kind = path_kind(path, error=error)
    if kind not in ("file", "missing"):
        raise error(path, "<file>", _not_a_file(kind, path, ""), fix or "remove it, or write elsewhere")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = _temp_file(path.parent, path.name)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise _write_error(error, path, e, fix) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    if fsync:
        fsync_directory(path.parent)
    return path


def finish_file(path: str | os.PathLike, *, error: type[InputError] = InputError) -> None:
    """For a file a library wrote (``safetensors.save_file`` creates it 0600): give it the mode a new file in its
    directory gets (read from a probe file created there ``0o666``: the umask, or a default ACL), and fsync it."""
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
        raise _write_error(error, path, e) from None


@contextlib.contextmanager
def atomic_directory(dst: str | os.PathLike, *, error: type[InputError] = InputError) -> Iterator[Path]:
    """Build a directory that appears at ``dst`` complete or not at all.

    Yields a new hidden directory next to ``dst`` (:data:`TEMP_DIR_PREFIX` + random, created ``0o777``: the kernel
    applies the umask); fill it, and on a normal exit it is fsynced and renamed onto ``dst`` (``dst`` may be missing
    or an empty directory). ``rename`` fails when ``dst`` gained files meanwhile (another writer won): ``error`` says
    so and nothing of this call remains. On any exception the temporary directory is removed; a directory this call
    did not create is never removed."""
    dst = Path(dst)
    parent = dst.parent
    tmp: Path | None = parent / f"{TEMP_DIR_PREFIX}{secrets.token_hex(8)}"
    try:
        os.mkdir(tmp, 0o777)
    except OSError as e:
        problem, how = os_problem(e, writing=True)
        raise error(parent, "<dir>", f"cannot create a directory there ({problem})", how) from None
    try:
        yield tmp
        try:
            fsync_directory(tmp)
            os.rename(tmp, dst)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise error(dst, "<dir>", "appeared with files in it while this command wrote its copy (another "
                            "process wrote it)", "choose a new destination, or remove it and run again") from None
            if e.errno == errno.ENOTDIR:
                raise error(dst, "<dir>", "a file appeared there while this command wrote its copy",
                            "choose a new destination") from None
            if e.errno == errno.EBUSY:  # a mount point (or a directory in use) cannot be renamed over
                raise error(dst, "<dir>", "is a mount point or in use, so the finished copy cannot be renamed onto it",
                            f"write into a new directory inside it, e.g. {brief(str(dst / 'draft'), 200)}") from None
            raise _write_error(error, dst, e) from None
        tmp = None
        fsync_directory(parent)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
