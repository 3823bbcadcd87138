"""The self-check engine tests' ``launch_server`` environment: ``SELFCHECK_SITE`` is their start-up hook folder
(tests/support/selfcheck_site/: the CPU runtime plus a sabotage and a presented SGLang version), first on PYTHONPATH.
The server itself is ``harness.servers.Server``."""

from __future__ import annotations

import os
from pathlib import Path

from harness.servers import server_env

SELFCHECK_SITE = Path(__file__).resolve().parent / "selfcheck_site"


def selfcheck_env(sabotage: str | None = None, present_version: str | None = None, **extra: str) -> dict:
    """``server_env()`` with the start-up hook first on PYTHONPATH and SGLang's crash diagnostics not waiting (it
    waits 60 s before it kills a failed server otherwise)."""
    env = server_env(SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS="0")
    env["PYTHONPATH"] = os.pathsep.join([str(SELFCHECK_SITE), env["PYTHONPATH"]])
    env.pop("EAGLE3_TEST_SABOTAGE", None)
    env.pop("EAGLE3_TEST_PRESENT_SGLANG_VERSION", None)
    if sabotage:
        env["EAGLE3_TEST_SABOTAGE"] = sabotage
    if present_version:
        env["EAGLE3_TEST_PRESENT_SGLANG_VERSION"] = present_version
    env.update(extra)
    return env
