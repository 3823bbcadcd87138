"""The user's files: every read and every write of a file the user gave or will use, in one place.

Reading (:func:`read_json_object`, :func:`open_regular`, :func:`read_bytes`):

- what stands at a path is looked at (``stat``, following symlinks) before anything is opened, so a fifo, a
  socket, a device, a directory, a dangling symlink or a symlink loop is named as such and never opened (no
  read blocks on a special file); files are opened ``O_NONBLOCK`` and checked again with ``fstat``;
- sizes are bounded (:data:`MAX_JSON_BYTES` for JSON documents);
- JSON is read strictly: UTF-8 only, duplicate keys refused (``object_pairs_hook``), ``NaN``/``Infinity``
  refused, integers of more than :data:`MAX_INT_DIGITS` digits and floats that overflow refused, nesting
  bounded (:data:`MAX_JSON_DEPTH`), lone surrogates (``"\\ud800"``) refused; all of it linear in the size;
- every ``OSError`` (permission denied, is a directory, symlink loop, no space left...) becomes the caller's
  :class:`~sglang_eagle3_capture.errors.InputError` naming the file, the field and the fix.

Writing (:func:`write_file_atomic`, :func:`atomic_directory`): a unique temporary name in the destination's
directory (``tempfile``: ``O_EXCL``, never follows a symlink), data flushed and fsynced, then renamed into
place and the directory fsynced, so a reader sees the old or the new complete file, never a torn one, and
concurrent writers never collide. Files get the mode a plain ``open()`` gives (``0o666 & ~umask``),
directories ``0o777 & ~umask``.

Messages: :func:`shown` renders a path or string with control characters and unprintable code points
escaped, and :func:`brief` bounds a value's ``repr``, so an error is always one line of bounded length.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import InputError, ManifestError

MAX_JSON_BYTES = 64 << 20  # a config, manifest, index or sample index; the largest real ones are a few MB
MAX_JSON_DEPTH = 64  # configs nest 3-4 levels
MAX_INT_DIGITS = 40  # no field of any file read here needs more
_KIND_NAMES = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a fifo", stat.S_IFSOCK: "a socket",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}
TEMP_SUFFIX = ".tmp"


# --- messages ------------------------------------------------------------------------------------------------------


def shown(value: Any) -> str:
    """A path or string for a one-line message: as is when printable, else with every control character, lone
    surrogate or other unprintable code point escaped (``\\n``, ``\\x1b``, ``\\udcff``)."""
    s = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def brief(value: Any, limit: int = 120) -> str:
    """``repr(value)`` escaped and cut to about ``limit`` characters, saying how long it was (bounded time: long
    lists and strings are cut before they are rendered)."""
    if isinstance(value, (list, tuple)) and len(value) > 12:
        head = ", ".join(brief(v, 24) for v in value[:8])
        text = f"[{head}, ... ({len(value)} items)]"
    elif isinstance(value, dict) and len(value) > 12:
        head = ", ".join(f"{brief(k, 24)}: {brief(v, 24)}" for k, v in list(value.items())[:6])
        text = f"{{{head}, ... ({len(value)} keys)}}"
    elif isinstance(value, str) and len(value) > limit:
        text = repr(value[:limit]) + f"... ({len(value)} characters)"
    else:
        try:
            text = repr(value)
        except RecursionError:  # a structure nested past the interpreter's limit
            text = f"<{type(value).__name__} nested too deeply>"
    text = shown(text)
    return text if len(text) <= limit + 40 else text[:limit] + f"... ({len(text)} characters)"


def one_line(message: str, limit: int = 4000) -> str:
    """``message`` as one printable line of at most about ``limit`` characters (the command line's last defence:
    messages are built short, see :func:`brief`)."""
    text = shown(message)
    return text if len(text) <= limit else text[:limit] + f"... (message cut, {len(text)} characters)"


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


def _err(error: type[InputError], path: Any, fld: str, problem: str, fix: str) -> InputError:
    return error(f"{shown(path)}: field '{fld}': {problem}; fix: {fix}")


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
            raise _err(error, path, "<file>", "file name too long", "use a shorter path") from None
        problem, how = os_problem(e)
        raise _err(error, path, "<file>", f"cannot be looked at ({problem})",
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
        raise _err(error, path, "<file>", _not_a_file(kind, path, missing), fix)


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
        raise _err(error, path, "<file>", _not_a_file(kind, path, ""), fix)
    return True


def list_directory(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str) -> list[str]:
    """The names in directory ``path``, sorted; a directory that cannot be listed raises ``error``."""
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        problem, how = os_problem(e)
        raise _err(error, path, "<dir>", f"cannot list the directory ({problem})", how if e.errno != errno.ENOENT
                   else fix) from None


# --- reading --------------------------------------------------------------------------------------------------------


def open_regular(path: str | os.PathLike, *, error: type[InputError] = InputError, fix: str,
                 missing: str = "not found"):
    """``path`` opened for binary reading, only if it is a regular file; never blocks on a special file."""
    require_file(path, error=error, fix=fix, missing=missing)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        problem, how = os_problem(e)
        raise _err(error, path, "<file>", f"cannot open ({problem})", how) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped for something else between stat and open
            raise _err(error, path, "<file>", "is not a regular file", fix)
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
                raise _err(error, path, "<file>", f"is {size} bytes, more than the {max_bytes} this reader accepts",
                           fix)
            data = f.read(max_bytes + 1)
        except OSError as e:
            problem, how = os_problem(e)
            raise _err(error, path, "<file>", f"cannot read ({problem})", how) from None
    if len(data) > max_bytes:
        raise _err(error, path, "<file>", f"holds more than the {max_bytes} bytes this reader accepts", fix)
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


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused("<document>", f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    if len(text) > 4 * MAX_INT_DIGITS:
        raise _Refused("<document>", f"a number written with {len(text)} characters")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _Refused("<document>", f"the number {text[:40]} is out of range")
    return value


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_tree(doc: Any) -> None:
    """Depth and lone surrogates, iteratively (linear in the document)."""
    stack: list[tuple[Any, int, str]] = [(doc, 1, "<document>")]
    while stack:
        node, depth, where = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_JSON_DEPTH:
                raise _Refused(where, f"nested deeper than {MAX_JSON_DEPTH} levels")
            for k, v in node.items():
                if _has_surrogate(k):
                    raise _Refused(shown(k), "the key holds a lone surrogate (not valid Unicode)")
                child = k if where == "<document>" else f"{where}.{k}"
                stack.append((v, depth + 1, child))
        elif isinstance(node, list):
            if depth > MAX_JSON_DEPTH:
                raise _Refused(where, f"nested deeper than {MAX_JSON_DEPTH} levels")
            stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, str) and _has_surrogate(node):
            raise _Refused(where, "the string holds a lone surrogate such as \\ud800 (not valid Unicode)")


def _depth_before_parsing(text: str) -> int:
    """An upper bound of the nesting depth, in linear time, before ``json.loads`` (whose C scanner recurses)."""
    opens = text.count("[") + text.count("{")
    if opens <= MAX_JSON_DEPTH:
        return opens
    depth = best = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > best:
                best = depth
                if best > MAX_JSON_DEPTH:
                    return best
        elif c in "]}":
            depth -= 1
    return best


def parse_json(data: bytes | str, *, where: Any, error: type[InputError] = InputError, fix: str) -> Any:
    """Parse a JSON document strictly (see the module doc); errors name ``where`` and the field."""
    if isinstance(data, bytes):
        if data.startswith(b"\xef\xbb\xbf"):
            raise _err(error, where, "<document>", "starts with a UTF-8 byte-order mark", f"save it without one; {fix}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _err(error, where, "<document>", f"not valid UTF-8 (byte {e.start})", fix) from None
    else:
        text = data
    if _depth_before_parsing(text) > MAX_JSON_DEPTH:
        raise _err(error, where, "<document>", f"nested deeper than {MAX_JSON_DEPTH} levels", fix)
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_int=_int,
                         parse_float=_float)
        _check_tree(doc)
    except _Refused as e:
        fld, problem = e.args
        raise _err(error, where, shown(fld), problem, fix) from None
    except json.JSONDecodeError as e:
        raise _err(error, where, "<document>", f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno})",
                   fix) from None
    except (ValueError, RecursionError) as e:
        raise _err(error, where, "<document>", f"not valid JSON ({brief(str(e), 80)})", fix) from None
    return doc


def read_json_object(path: str | os.PathLike, *, fix: str, missing: str = "not found",
                     error: type[InputError] = ManifestError, max_bytes: int = MAX_JSON_BYTES) -> dict:
    """The JSON object in the file ``path``, read strictly (see the module doc). Anything else raises ``error`` (the
    caller's error class) naming the file, the field and ``fix``; ``missing`` says what was not found."""
    path = Path(path)
    doc = parse_json(read_bytes(path, error=error, fix=fix, missing=missing, max_bytes=max_bytes), where=path,
                     error=error, fix=fix)
    if not isinstance(doc, dict):
        raise _err(error, path, "<document>", f"expected a JSON object, got {_json_type(doc)}", fix)
    return doc


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


# --- writing --------------------------------------------------------------------------------------------------------


def umask() -> int:
    """The process umask, read without changing it where Linux says it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)  # not thread-safe, hence only the fallback
    os.umask(old)
    return old


def file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: ``0o666 & ~umask``."""
    return 0o666 & ~umask()


def dir_mode() -> int:
    """The mode ``mkdir`` gives a new directory: ``0o777 & ~umask``."""
    return 0o777 & ~umask()


def fsync_directory(path: str | os.PathLike) -> None:
    """Make a rename or a new entry in directory ``path`` durable (best effort where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
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
    return _err(error, path, "<file>", f"cannot write ({problem})", fix or how)


def write_file_atomic(path: str | os.PathLike, data: bytes | str, *, error: type[InputError] = InputError,
                      fix: str | None = None, fsync: bool = True) -> Path:
    """Write ``data`` to ``path`` atomically (see the module doc); any ``OSError`` raises ``error`` naming the file.

    A directory (or anything but a regular file or nothing) standing at ``path`` is refused, never replaced."""
    path = Path(path)
    kind = path_kind(path, error=error)
    if kind not in ("file", "missing"):
        raise _err(error, path, "<file>", _not_a_file(kind, path, ""), fix or "remove it, or write elsewhere")
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:64]}.", suffix=TEMP_SUFFIX)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), file_mode())
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
    """For a file a library wrote (``safetensors.save_file`` creates it 0600): give it the umask's mode and fsync it."""
    try:
        os.chmod(path, file_mode())
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise _write_error(error, path, e) from None


# Temporary directories of atomic_directory: ".sglang-eagle3-capture.<host>.<pid>.<random>" next to the destination,
# holding OWNER_FILE; a later run removes those whose process is gone (same host), so kill -9 leaves nothing for long.
TEMP_DIR_PREFIX = ".sglang-eagle3-capture."
OWNER_FILE = ".owner"


def host_tag() -> str:
    return "".join(c for c in socket.gethostname() if c.isalnum() or c in "-_")[:40] or "host"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's live process
        return True
    return True


def stale_temp_dirs(parent: str | os.PathLike) -> list[Path]:
    """Temporary directories :func:`atomic_directory` left in ``parent`` whose process is gone (this host only)."""
    out = []
    host = host_tag()
    try:
        names = os.listdir(parent)
    except OSError:
        return out
    for name in names:
        if not name.startswith(TEMP_DIR_PREFIX):
            continue
        parts = name[len(TEMP_DIR_PREFIX):].split(".")
        if len(parts) != 3 or parts[0] != host or not (parts[1].isascii() and parts[1].isdigit()):
            continue
        d = Path(parent) / name
        try:
            owner = (d / OWNER_FILE).read_text(encoding="ascii").split()
        except (OSError, UnicodeDecodeError):
            continue  # not ours (or not readable): never touched
        if d.is_symlink() or owner[:2] != [host, parts[1]] or _alive(int(parts[1])):
            continue
        out.append(d)
    return out


@contextlib.contextmanager
def atomic_directory(dst: str | os.PathLike, *, error: type[InputError] = InputError,
                     removed: list | None = None) -> Iterator[Path]:
    """Build a directory that appears at ``dst`` complete or not at all.

    Yields a new temporary directory next to ``dst`` (named :data:`TEMP_DIR_PREFIX` + host, pid, random; created by
    this call and holding :data:`OWNER_FILE`); fill it, and on a normal exit it is fsynced and renamed onto ``dst``
    (``dst`` may be missing or an empty directory). ``rename`` fails when ``dst`` gained files meanwhile (another
    writer won): ``error`` says so and nothing of this call remains. On any failure the temporary directory is
    removed; a directory this call did not create is never removed. Leftovers of killed runs on this host (their
    process gone) are removed first and listed in ``removed``."""
    dst = Path(dst)
    parent = dst.parent
    for stale in stale_temp_dirs(parent):
        shutil.rmtree(stale, ignore_errors=True)
        if removed is not None:
            removed.append(stale)
    try:
        tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f"{TEMP_DIR_PREFIX}{host_tag()}.{os.getpid()}."))
    except OSError as e:
        problem, how = os_problem(e, writing=True)
        raise _err(error, parent, "<dir>", f"cannot create a directory there ({problem})", how) from None
    try:
        try:
            (tmp / OWNER_FILE).write_text(f"{host_tag()} {os.getpid()}\n", encoding="ascii")
        except OSError as e:
            raise _write_error(error, tmp, e) from None
        yield tmp
        try:
            os.unlink(tmp / OWNER_FILE)
            os.chmod(tmp, dir_mode())
            fsync_directory(tmp)
            os.rename(tmp, dst)
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise _err(error, dst, "<dir>", "appeared with files in it while this command wrote its copy (another "
                           "process wrote it)", "choose a new destination, or remove it and run again") from None
            if e.errno == errno.ENOTDIR:
                raise _err(error, dst, "<dir>", "a file appeared there while this command wrote its copy",
                           "choose a new destination") from None
            raise _write_error(error, dst, e) from None
        tmp = None
        fsync_directory(parent)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
