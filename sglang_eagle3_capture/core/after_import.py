"""Run code right after a module is first executed: the import hook the plugin and the CPU runtime share (standard
library only: it runs from the CPU runtime's ``sitecustomize``)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _ThenRun(importlib.abc.Loader):
    """The module's real loader, followed by the actions registered for it."""

    def __init__(self, loader, actions: list[Callable[[], None]]) -> None:
        self.loader, self.actions = loader, actions

    def __getattr__(self, name):  # get_source, get_filename, is_package, ... of the real loader
        return getattr(self.__dict__["loader"], name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        for action in self.actions:
            action()


class _AfterImportFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: the real finders locate a registered module, and this one wraps its loader once."""

    def __init__(self) -> None:
        self.pending: dict[str, list[Callable[[], None]]] = {}
        self._resolving: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.pending or fullname in self._resolving:
            return None
        self._resolving.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._resolving.discard(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRun(spec.loader, self.pending.pop(fullname))
        return spec


def when_imported(name: str, action: Callable[[], None]) -> None:
    """Run ``action()`` right after module ``name`` is first executed (now, if it already is), once per action."""
    if name in sys.modules:
        action()
        return
    # One finder per interpreter, found by its class name so a re-imported copy of this module reuses it.
    finder = next((f for f in sys.meta_path if type(f).__name__ == _AfterImportFinder.__name__
                   and hasattr(f, "pending")), None)
    if finder is None:
        finder = _AfterImportFinder()
        sys.meta_path.insert(0, finder)
    actions = finder.pending.setdefault(name, [])
    if action not in actions:
        actions.append(action)
