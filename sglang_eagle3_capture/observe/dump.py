"""Capture dump for debugging deployments: what the target really feeds the draft's fc, per rank.

Set ``SGLANG_EAGLE3_CAPTURE_DUMP=DIR`` before starting SGLang. Every target model that configures
EAGLE-3 capture (every TP rank, in its scheduler process) then writes its first few forward batches:

- ``DIR/tp{R}-pid{P}-{RUN}-{n:03d}.safetensors`` with ``aux_hidden_states`` ``[T, K*H]`` (chunks in fc order,
  exactly the tensor handed to the logits processor, which passes it on to the draft), ``input_ids``
  ``[T]`` (the batch's token ids, also for a wrapper such as Kimi-K2.5 that hands its decoder embeddings, see
  ``capture.batch_token_ids``; absent when the request served embeddings) and ``positions`` ``[T]``;
- ``DIR/tp{R}-pid{P}-{RUN}-{n:03d}.json``: layer ids, loop indices, where the ids came from, TP/PP rank, pid,
  process title, SGLang and package versions, forward mode, shapes and dtype (``compare`` reads both back as
  :mod:`sglang_eagle3_capture.doctor.dump_schema` declares them).

``RUN`` (start time and a random token) keeps one server run's files from overwriting another's, even when a fresh
container gives the scheduler the same pid. Each file is written atomically (a temporary name, fsync, rename; the
mode follows the umask), the ``.json`` first, so a reader never sees a torn batch nor a batch without its metadata.

The dump is a debugging aid and never stops serving: a bound that is not a positive integer, a directory it cannot
create, or a batch it cannot write (a directory removed or made read-only meanwhile, a full disk), logs one ERROR
naming the variable or directory and the fix, turns the dump off for that process, and the forward goes on.

Bounded: at most ``SGLANG_EAGLE3_CAPTURE_DUMP_MAX`` batches (default 4) and
``SGLANG_EAGLE3_CAPTURE_DUMP_MAX_BYTES`` bytes of tensors (default 64 MiB) per process; a batch that
would overflow the byte budget is skipped. The environment is read once, when capture is configured;
unset, no dump object exists and the forward pays nothing. Batches run inside CUDA-graph capture or
torch.compile tracing are not dumped (the graphs replay without Python).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any, Mapping

from .. import __version__
from ..core.errors import DumpConfigError, Eagle3CaptureError, brief, shown
from ..core.releases import installed_sglang_version
from ..core.userfiles import os_problem, write_file_atomic

logger = logging.getLogger(__name__)

ENV_DIR = "SGLANG_EAGLE3_CAPTURE_DUMP"
ENV_MAX_BATCHES = "SGLANG_EAGLE3_CAPTURE_DUMP_MAX"
ENV_MAX_BYTES = "SGLANG_EAGLE3_CAPTURE_DUMP_MAX_BYTES"
DEFAULT_MAX_BATCHES = 4
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def _positive_int(environ: Mapping[str, str], name: str, default: int) -> int | None:
    """The variable's value, ``default`` when unset, or None (one ERROR naming it, its value and the fix) when it is
    not a positive integer: the caller turns the dump off, serving goes on."""
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        logger.error("eagle3-capture dump: %s=%s: expected a positive integer; the dump is off for this process "
                     "(pid %d) and serving goes on; fix: set %s=%d or unset it",
                     name, brief(raw, 80), os.getpid(), name, default)
        return None
    return value


def process_title() -> str | None:
    """The process title SGLang sets (``sglang::scheduler_TP0`` ...), or None when unavailable."""
    try:
        import setproctitle
    except ImportError:
        return None
    return setproctitle.getproctitle()


class CaptureDump:
    """Writes the first ``max_batches`` aux batches of one process to ``directory`` (see module doc).

    Never raises once constructed, nor while constructing: a failure turns it off (:attr:`disabled`) with one ERROR.
    """

    def __init__(self, directory: str | os.PathLike, *, metadata: dict, max_batches: int = DEFAULT_MAX_BATCHES,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.metadata = dict(metadata)
        self.max_batches = max_batches
        self.max_bytes = max_bytes
        self.written = 0
        self.bytes_written = 0
        self.disabled = False
        self.run = f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
        self._warned_size = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not self.directory.is_dir():
                raise NotADirectoryError(20, "not a directory", str(self.directory))
        except OSError as e:
            self._turn_off("cannot create the dump directory", e)

    def _turn_off(self, what: str, e: BaseException) -> None:
        self.disabled = True
        if isinstance(e, OSError):
            reason = os_problem(e, writing=True)[0]
        else:
            reason = brief(e.problem if isinstance(e, Eagle3CaptureError) else f"{type(e).__name__}: {e}", 300)
        logger.error("eagle3-capture dump: %s %s (%s); the dump is off for this process (pid %d) and serving goes on; "
                     "fix: set %s to a directory this server can write (with free space), or unset it",
                     what, shown(self.directory), reason, os.getpid(), ENV_DIR)

    @property
    def done(self) -> bool:
        """True once ``max_batches`` batches were written (or the dump turned itself off)."""
        return self.disabled or self.written >= self.max_batches

    def __call__(self, aux: Any, input_ids: Any, positions: Any, forward_mode: Any = None) -> None:
        """Dump one batch (no-op once done, and while a CUDA graph or torch.compile is being captured). Never raises:
        a batch that cannot be written turns the dump off (one ERROR) and the forward goes on."""
        if self.done:
            return
        try:
            import torch

            if torch.compiler.is_compiling() or (aux.is_cuda and torch.cuda.is_current_stream_capturing()):
                return
            tensors = {"aux_hidden_states": aux, "input_ids": input_ids, "positions": positions}
            tensors = {k: v for k, v in tensors.items() if v is not None}  # no input_ids for served embeddings
            size = sum(t.numel() * t.element_size() for t in tensors.values())
            if self.bytes_written + size > self.max_bytes:
                if not self._warned_size:
                    logger.warning("eagle3-capture dump: batch of %d bytes skipped, it would exceed %s=%d (written %d)",
                                   size, ENV_MAX_BYTES, self.max_bytes, self.bytes_written)
                    self._warned_size = True
                return
            self._write(tensors, forward_mode)
            self.bytes_written += size
            self.written += 1
        except Exception as e:  # noqa: BLE001 - a debugging aid must never take the scheduler down
            self._turn_off("cannot write a batch to", e)

    def _write(self, tensors: dict, forward_mode: Any) -> None:
        from safetensors.torch import save

        stem = f"tp{self.metadata.get('tp_rank')}-pid{os.getpid()}-{self.run}-{self.written:03d}"
        cpu = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
        meta = {
            **self.metadata,
            "batch": self.written,
            "run": self.run,
            "forward_mode": getattr(forward_mode, "name", None if forward_mode is None else str(forward_mode)),
            "shapes": {k: list(v.shape) for k, v in cpu.items()},
            "dtypes": {k: str(v.dtype) for k, v in cpu.items()},
        }
        # metadata first: a reader that finds the batch finds its metadata; both atomic, mode from the umask
        write_file_atomic(self.directory / f"{stem}.json", json.dumps(meta, indent=2, sort_keys=True) + "\n",
                          error=DumpConfigError)
        write_file_atomic(self.directory / f"{stem}.safetensors", save(cpu, metadata={"format": "pt"}),
                          error=DumpConfigError)


def dump_from_env(metadata: dict, environ: Mapping[str, str] | None = None) -> CaptureDump | None:
    """A :class:`CaptureDump` when ``SGLANG_EAGLE3_CAPTURE_DUMP`` is set, else None (read once, at configure time).

    Example::

        >>> dump_from_env({"layer_ids": [-1, 2, 30]}, environ={}) is None
        True
    """
    env = os.environ if environ is None else environ
    directory = env.get(ENV_DIR, "").strip()
    if not directory:
        return None
    max_batches = _positive_int(env, ENV_MAX_BATCHES, DEFAULT_MAX_BATCHES)
    max_bytes = _positive_int(env, ENV_MAX_BYTES, DEFAULT_MAX_BYTES)
    if max_batches is None or max_bytes is None:
        return None  # it said why (one ERROR per bad variable); serving goes on without the dump
    meta = {**metadata, "pid": os.getpid(), "ppid": os.getppid(), "process_title": process_title(),
            "sglang_version": installed_sglang_version(), "package_version": __version__}
    dump = CaptureDump(directory, metadata=meta, max_batches=max_batches, max_bytes=max_bytes)
    if dump.disabled:
        return None  # it said why (one ERROR); serving goes on without it
    logger.info("eagle3-capture dump: writing up to %d batches / %d bytes to %s (tp_rank %s, pid %d)",
                max_batches, max_bytes, directory, metadata.get("tp_rank"), os.getpid())
    return dump
