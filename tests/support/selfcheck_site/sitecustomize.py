"""Test-only start-up hook for SGLang's processes in the self-check engine tests (never shipped, never imported by
the package). Put this folder first on PYTHONPATH: Python imports the first ``sitecustomize`` it finds, so this one
also installs the CPU runtime's patches (cpu_runtime/ must follow on the path), then, driven by the environment:

- ``EAGLE3_TEST_SABOTAGE=permute|shift``: after the plugin's ``core.sglang.target.configure`` has configured a target
  model, alter what its feed hands the draft: ``permute`` swaps the first two fc chunks of the plan, ``shift`` moves
  every captured loop index up by one (the same list object, so the feed's own identity check still passes);
- ``EAGLE3_TEST_PRESENT_SGLANG_VERSION=V``: the package reads ``V`` as the installed SGLang version (a release newer
  than the table, presented to the installed one).
"""

import dataclasses
import os
import sys

import sglang_cpu_patches

from sglang_eagle3_capture.core.after_import import when_imported

sglang_cpu_patches.install_import_hook()


def _sabotage(feed, kind):
    if kind == "permute":
        order = list(feed.plan.chunk_order)
        order[0], order[1] = order[1], order[0]
        feed.plan = dataclasses.replace(feed.plan, chunk_order=tuple(order))
    elif kind == "shift":
        feed.layers[:] = [i + 1 for i in feed.layers]
    else:
        raise ValueError(f"EAGLE3_TEST_SABOTAGE={kind!r}: expected permute or shift")
    print(f"TEST SABOTAGE {kind}: plan {feed.plan.chunk_order}, loop {feed.layers} (pid {os.getpid()})", flush=True)


def _wrap_configure():
    target = sys.modules["sglang_eagle3_capture.core.sglang.target"]
    original, kind = target.configure, os.environ["EAGLE3_TEST_SABOTAGE"]

    def configure(model, *args, **kwargs):
        out = original(model, *args, **kwargs)
        for module in model.modules():
            feed = vars(module).get("_eagle3_capture_feed")
            if feed is not None and feed.plan is not None:
                _sabotage(feed, kind)
        return out

    target.configure = configure


def _present_version():
    releases = sys.modules["sglang_eagle3_capture.core.releases"]
    version = os.environ["EAGLE3_TEST_PRESENT_SGLANG_VERSION"]
    releases.installed_sglang_version = lambda: version


if os.environ.get("EAGLE3_TEST_SABOTAGE"):
    when_imported("sglang_eagle3_capture.core.sglang.target", _wrap_configure)
if os.environ.get("EAGLE3_TEST_PRESENT_SGLANG_VERSION"):
    when_imported("sglang_eagle3_capture.core.releases", _present_version)
