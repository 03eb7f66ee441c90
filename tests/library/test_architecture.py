"""The analysis contract (docs/architecture.md): every analysis package has the same parts, its client
module runs on a device without the server stack, and no layer imports upwards."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedstats.analyses

PACKAGES = sorted(m.name for m in pkgutil.iter_modules(fedstats.analyses.__path__) if m.ispkg)
HEAVY = ("scipy.stats", "pandas", "pyarrow", "typer", "rich", "dask", "distributed", "sqlalchemy")
SRC = Path(fedstats.__file__).parent

# layer -> the layers it may import (DESIGN.md: imports point downwards only). The device SDK (client) and
# the server (service) both stand on wire and never import each other; only the CLI sees both.
_CORE = {"analyses", "engine", "wire", "secagg", "vdaf", "privacy", "sketches"}
LAYERS = {
    "privacy": {"privacy"},
    "sketches": {"sketches", "privacy"},
    "secagg": {"secagg", "privacy"},
    "vdaf": {"vdaf", "privacy"},
    "wire": {"wire", "privacy"},
    "datasets": {"datasets"},
    "engine": {"engine", "secagg", "privacy", "sketches"},
    "analyses": {"analyses", "engine", "wire", "secagg", "vdaf", "privacy", "sketches"},
    "experiments": _CORE | {"experiments", "datasets"},
    "client": _CORE | {"client"},
    "service": _CORE | {"service"},
    "cli": _CORE | {"cli", "client", "service", "experiments", "datasets", "_resources"},
}


def test_the_analyses_are_packages() -> None:
    assert {"bitpushing", "chi2", "entropy", "exact", "heterogeneity", "performance_gap"} <= set(
        PACKAGES
    )


@pytest.mark.parametrize("name", PACKAGES)
def test_each_analysis_has_the_four_parts(name: str) -> None:
    folder = SRC / "analyses" / name
    for part in ("client", "protocol", "api"):
        assert (folder / f"{part}.py").is_file(), f"analyses/{name}/{part}.py is missing"
    client = importlib.import_module(f"fedstats.analyses.{name}.client")
    encoders = [n for n in dir(client) if n.startswith("encode")]
    assert encoders, f"analyses/{name}/client.py defines no encode_* function"
    for n in encoders:
        fn = getattr(client, n)
        assert fn.__module__ == client.__name__ or fn.__module__.startswith("fedstats.")


@pytest.mark.parametrize("name", PACKAGES)
def test_client_modules_import_nothing_heavy(name: str) -> None:
    code = (
        f"import sys; import fedstats.analyses.{name}.client; "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"fedstats.analyses.{name}.client imports {out.stdout.strip()}"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m.split(".")[1] for m in found if m.startswith("fedstats.") and m.count(".") >= 1}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_imports_point_downwards(layer: str) -> None:
    allowed = LAYERS[layer] | {
        "errors",
        "randomness",
        "results",
        "_validation",
        "_io",
        "_numeric",
        "_lazy",
        "progress",
    }
    bad = []
    for path in sorted((SRC / layer).rglob("*.py")):
        for target in _imports(path) - allowed:
            bad.append(f"{path.relative_to(SRC)} imports fedstats.{target}")
    assert not bad, "\n".join(bad)


def test_the_device_sdk_and_the_server_do_not_import_each_other() -> None:
    """Issue 25: client and service share only fedstats.wire (checked on every import, lazy ones too)."""
    for side, other in (("client", "service"), ("service", "client")):
        for path in sorted((SRC / side).rglob("*.py")):
            assert other not in _imports(path), f"{path.relative_to(SRC)} imports fedstats.{other}"


def test_importing_the_device_sdk_loads_no_server_module() -> None:
    code = (
        "import sys, fedstats.client; "
        "print(','.join(sorted(m for m in sys.modules if m.startswith('fedstats.service'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# the server's own layers (docs/architecture.md, issue 28): http -> domain -> store, and only the store
# speaks SQL; domain code knows nothing of HTTP
SERVICE_LAYERS = {
    "http": {"http", "domain", "store"},
    "domain": {"domain", "store"},
    "store": {"store"},
}
SERVICE_FORBIDDEN = {
    "http": {"sqlalchemy", "alembic", "psycopg"},
    "domain": {"sqlalchemy", "alembic", "psycopg", "fastapi", "starlette", "uvicorn", "httpx"},
    "store": {"fastapi", "starlette", "uvicorn", "httpx"},
}


def _service_imports(path: Path) -> tuple[set[str], set[str]]:
    """(service sublayers, third-party top-level packages) imported by ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    layers = {
        n.split(".")[2]
        for n in names
        if n.startswith("fedstats.service.") and n.split(".")[2] in SERVICE_LAYERS
    }
    return layers, {n.split(".")[0] for n in names}


@pytest.mark.parametrize("layer", sorted(SERVICE_LAYERS))
def test_the_service_layers_point_downwards(layer: str) -> None:
    bad = []
    for path in sorted((SRC / "service" / layer).rglob("*.py")):
        if "migrations" in path.parts and layer == "store":
            continue
        layers, packages = _service_imports(path)
        rel = path.relative_to(SRC)
        bad += [f"{rel} imports service.{x}" for x in sorted(layers - SERVICE_LAYERS[layer])]
        bad += [f"{rel} imports {x}" for x in sorted(packages & SERVICE_FORBIDDEN[layer])]
    assert not bad, "\n".join(bad)


def test_the_service_package_holds_only_its_layers() -> None:
    top = {p.name for p in (SRC / "service").iterdir() if not p.name.startswith("__")}
    assert top == set(SERVICE_LAYERS), top
