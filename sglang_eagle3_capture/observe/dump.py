"""Capture dump: what the target really feeds the draft's fc, per rank (``SGLANG_EAGLE3_CAPTURE_DUMP=DIR``;
docs/how-it-works.md, "The capture dump"). It never stops serving: any failure logs one ERROR and turns it off for
that process."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any, Mapping

from .. import __version__
from ..core import switches
from ..core.errors import Eagle3CaptureError, cut
from ..core.logs import get_logger
from ..core.releases import installed_sglang_version
from ..core.userfiles import PrivateDirectory, os_problem

logger = get_logger(__name__)

ENV_DIR, ENV_MAX_BATCHES, ENV_MAX_BYTES = switches.DUMP.name, switches.DUMP_MAX.name, switches.DUMP_MAX_BYTES.name
DEFAULT_MAX_BATCHES, DEFAULT_MAX_BYTES = switches.DUMP_MAX.default, switches.DUMP_MAX_BYTES.default


def process_title() -> str | None:  # the one SGLang sets (sglang::scheduler_TP0 ...)
    try:
        import setproctitle
    except ImportError:
        return None
    return setproctitle.getproctitle()


class CaptureDump:
    """Writes one process's first ``max_batches`` aux batches to ``directory``; never raises, constructing included."""

    def __init__(self, directory: str | os.PathLike, *, metadata: dict, max_batches: int = DEFAULT_MAX_BATCHES,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory, self.metadata = Path(directory), dict(metadata)
        self.max_batches, self.max_bytes = max_batches, max_bytes
        self.written = self.bytes_written = 0
        self.disabled = self._warned_size = False
        # the run keeps one server run's files apart from another's, even when a fresh container reuses the pid
        self.run = f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
        self._dir: PrivateDirectory | None = None
        try:
            self._dir = PrivateDirectory.open(self.directory)
        except Eagle3CaptureError as e:
            self._turn_off("cannot use the dump directory", e)

    def _turn_off(self, what: str, e: BaseException) -> None:
        self.disabled = True
        if self._dir is not None:
            self._dir.close()
        reason, fix = (os_problem(e, writing=True) if isinstance(e, OSError)
                       else (cut(e.problem, 300), e.fix) if isinstance(e, Eagle3CaptureError)
                       else (cut(f"{type(e).__name__}: {e}", 300), "report it"))
        logger.error("eagle3-capture dump: %s %s (%s); the dump is off for this process (pid %d) and serving goes on; "
                     "fix: %s (%s; unset it to turn the dump off)", what, self.directory, reason, os.getpid(), fix,
                     ENV_DIR)

    @property
    def done(self) -> bool:
        return self.disabled or self.written >= self.max_batches

    def __call__(self, aux: Any, input_ids: Any, positions: Any, forward_mode: Any = None) -> None:
        """Dump one batch (not while a CUDA graph or torch.compile is being captured)."""
        if self.done:
            return
        try:
            import torch

            if torch.compiler.is_compiling() or (aux.is_cuda and torch.cuda.is_current_stream_capturing()):
                return
            tensors = {k: v for k, v in (("aux_hidden_states", aux), ("input_ids", input_ids), ("positions", positions))
                       if v is not None}  # no input_ids for served embeddings
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
        meta = {**self.metadata, "batch": self.written, "run": self.run,
                "forward_mode": getattr(forward_mode, "name", None if forward_mode is None else str(forward_mode)),
                "shapes": {k: list(v.shape) for k, v in cpu.items()},
                "dtypes": {k: str(v.dtype) for k, v in cpu.items()}}
        # metadata first: a reader that finds the batch finds its metadata; both atomic, 0600 through the directory
        # opened at start; metadata whose tensors cannot be written (a full disk) is removed again
        self._dir.write(f"{stem}.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
        try:
            self._dir.write(f"{stem}.safetensors", save(cpu, metadata={"format": "pt"}))
        except BaseException:
            self._dir.remove(f"{stem}.json")
            raise


def dump_from_env(metadata: dict, environ: Mapping[str, str] | None = None) -> CaptureDump | None:
    """A :class:`CaptureDump` when ``SGLANG_EAGLE3_CAPTURE_DUMP`` is set (read once, at configure time)."""
    env = os.environ if environ is None else environ
    directory = switches.read(switches.DUMP, env)
    if not directory:
        return None
    max_batches, max_bytes = switches.read(switches.DUMP_MAX, env), switches.read(switches.DUMP_MAX_BYTES, env)
    meta = {**metadata, "pid": os.getpid(), "ppid": os.getppid(), "process_title": process_title(),
            "sglang_version": installed_sglang_version(), "package_version": __version__}
    dump = CaptureDump(directory, metadata=meta, max_batches=max_batches, max_bytes=max_bytes)
    if dump.disabled:
        return None  # it said why (one ERROR); serving goes on without it
    logger.info("eagle3-capture dump: writing up to %d batches / %d bytes to %s (tp_rank %s, pid %d)",
                max_batches, max_bytes, directory, metadata.get("tp_rank"), os.getpid())
    return dump
