"""Golden results: a seeded run's numbers recorded in ``tests/golden/`` and compared on every test run.

Refactors must keep results (issue 12): the seeded demo and the ``--quick`` reproductions are compared with
their recorded JSON, floats to a relative 1e-9 (BLAS may differ in the last bits between machines), wall
times and CPU counts left out. A change that alters results on purpose rewrites the files
(``FEDSTATS_UPDATE_GOLDEN=1 pytest tests/...``) and says in its commit which numbers changed and why.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden"
_TIMING = re.compile(r"(^|_)(seconds|ms|s)(_|$)")
_MACHINE = ("timings", "cpu_count", "load_average", "machine", "platform", "python")


def without_timings(doc: Any) -> Any:
    """``doc`` without wall times and machine state (keys with a ``seconds``, ``ms`` or ``s`` part, and
    :data:`_MACHINE`)."""
    if isinstance(doc, dict):
        return {
            k: without_timings(v)
            for k, v in doc.items()
            if k not in _MACHINE and not _TIMING.search(str(k))
        }
    if isinstance(doc, list):
        return [without_timings(v) for v in doc]
    return doc


def same(a: Any, b: Any, where: str) -> None:
    """Equal structures; floats to a relative 1e-9 (absolute 1e-12)."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), (where, sorted(set(a) ^ set(b)))
        for k in a:
            same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
    else:
        assert a == b, (where, a, b)


def check_golden(name: str, doc: Any) -> None:
    """Compare ``doc`` (timings left out) with ``tests/golden/<name>.json``; rewrite it on request."""
    path = GOLDEN / f"{name}.json"
    doc = json.loads(json.dumps(without_timings(doc)))  # the JSON view: tuples as lists
    if os.environ.get("FEDSTATS_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    same(doc, json.loads(path.read_text()), name)
