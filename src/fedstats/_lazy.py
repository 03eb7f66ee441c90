"""Lazy package exports (PEP 562): a package lists its public names and loads each module on first use.

A device imports only ``fedstats.analyses.<name>.client``; importing that submodule runs its package's
``__init__``, which must therefore not import the server side (protocols, scipy.stats, the secure
aggregation stack). Every such package builds its ``__getattr__``/``__dir__`` here, from one table.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, where: Mapping[str, str], aliases: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Build a package's module-level ``__getattr__`` and ``__dir__`` from a table of public names.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    where : Mapping[str, str]
        Public name to the submodule defining it: relative (``"protocol"``) or absolute
        (``"fedstats.engine.core"``).
    aliases : Mapping[str, str], optional
        Old public name to the name it now refers to (kept importable for compatibility).

    Returns
    -------
    (callable, callable)
        ``__getattr__(name)`` (imports the defining module, caches the value in the package, raises
        ``AttributeError`` for unknown names) and ``__dir__()``.
    """
    alias = dict(aliases or {})

    def __getattr__(name: str) -> Any:
        target = alias.get(name, name)
        module = where.get(target)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        full = module if module.startswith("fedstats.") else f"{package}.{module}"
        value = getattr(importlib.import_module(full), target)
        vars(sys.modules[package])[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where, *alias})

    return __getattr__, __dir__
