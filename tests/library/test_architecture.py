"""The analysis contract (docs/architecture.md): every analysis package has the same parts, its client
module runs on a device without the server stack, and no layer imports upwards."""

from __future__ import annotations

import ast
import functools
import graphlib
import importlib
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fedstats.analyses

PACKAGES = sorted(m.name for m in pkgutil.iter_modules(fedstats.analyses.__path__) if m.ispkg)
HEAVY = ("scipy.stats", "pandas", "pyarrow", "typer", "rich", "dask", "distributed", "sqlalchemy")
SRC = Path(fedstats.__file__).parent

# layer -> the layers it may import (DESIGN.md: imports point downwards only). The device SDK (client) and
# the server (service) both stand on wire and never import each other; only the CLI sees both.
_CORE = {"analyses", "engine", "wire", "secagg", "vdaf", "dap", "privacy", "sketches"}
LAYERS = {
    "privacy": {"privacy"},
    "sketches": {"sketches", "privacy"},
    "secagg": {"secagg", "privacy"},
    "vdaf": {"vdaf", "privacy"},
    "dap": {"dap", "vdaf", "privacy"},  # DAP-09 wire, HPKE, client and collector over Prio3
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


@functools.cache
def _parse(path: Path) -> ast.Module:
    """The syntax tree of a source file, parsed once per test process (several tests walk every module)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _imports(path: Path) -> set[str]:
    tree = _parse(path)
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
    tree = _parse(path)
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


# -- import cycles (issue 41) ------------------------------------------------------------------------------

MAX_FUNCTION_IMPORTS = 194
"""Import statements of fedstats modules inside functions (a def, lambda or method), at most: 188 before
the cycles were removed (issue 41), 175 after, 188 with the planner and the warnings: 10 of those 13
are the CLI's lazy imports (``fedstats plan``'s 8 subcommands, ``report_warnings``, ``validate``: the
command modules must not load the analyses, tests/cli/test_cli_lazy.py), 2 the validation cells' worker
imports (the cells run in worker processes), 1 ``usefulness.result_warnings`` loading the chi-square
power model only for chi-square results; 189 with the PLD accountant, which the ledger loads (scipy's
FFT) only when a charge describes its mechanisms, so that a device's budget stays light; 191 with basic as bit pushing's default (``fedstats mean`` reads
the config's default when it runs, the CLI lazily; one more validation cell's worker import); 197 with the edge and start-up checks (6 more lazy imports in
``fedstats server``, ``admin`` and ``enroll``, whose modules must not load the service at start-up; about
two thirds of all are the CLI's); 195 with the network demo's enrollment and task imports at module level
(the demo module is itself loaded lazily). Each hides a dependency from the reader and costs a lookup per
call; one that only breaks a cycle should become a better module boundary. Lower this number when you
remove some; raise it only for a measured start-up cost (benchmarks/cli_startup.py)."""


def _module_names() -> dict[str, tuple[Path, bool]]:
    """Every module of src/fedstats: dotted name -> (file, is a package's ``__init__``)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import under ``node`` with whether it runs inside a function; ``if TYPE_CHECKING:`` blocks
    are skipped (they never run: annotations only)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from _walk(ast.Module(body=child.orelse, type_ignores=[]), in_function)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, in_function
        inner = in_function or isinstance(
            child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        )
        yield from _walk(child, inner)


def _targets(node: ast.Import | ast.ImportFrom, module: str, package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        parent = module if package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            parent = parent.rpartition(".")[0]
        base = f"{parent}.{base}" if base else parent
    return [f"{base}.{a.name}" for a in node.names]


@functools.cache
def _import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]], int]:
    """(module-level graph, graph with imports inside functions too, in-function import statements).

    An edge a -> b: module a imports module b (``from b import name`` counts as importing b, or b.name
    when that is a module); only fedstats modules are nodes. Built once per test process (three tests
    read it; each build took 3-10 s), and read only.
    """
    modules = _module_names()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    top: dict[str, set[str]] = {m: set() for m in modules}
    full: dict[str, set[str]] = {m: set() for m in modules}
    inside = 0
    for module, (path, package) in modules.items():
        tree = _parse(path)
        for node, in_function in _walk(tree, False):
            found = {
                t
                for n in _targets(node, module, package)
                if n.startswith("fedstats") and (t := resolve(n)) not in (None, module)
            }
            if not found:
                continue
            inside += in_function
            full[module] |= found  # type: ignore[arg-type]
            if not in_function:
                top[module] |= found  # type: ignore[arg-type]
    return top, full, inside


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_no_import_cycle_among_module_level_imports() -> None:
    top, _full, _inside = _import_graph()
    cycle = _cycle(top)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    """An import moved into a function still runs: it must not close a cycle either."""
    _top, full, _inside = _import_graph()
    cycle = _cycle(full)
    assert not cycle, "import cycle (imports inside functions counted): " + " -> ".join(cycle)


def test_imports_inside_functions_do_not_grow(capsys: pytest.CaptureFixture[str]) -> None:
    _top, _full, inside = _import_graph()
    with capsys.disabled():
        print(
            f"\nimports of fedstats modules inside functions: {inside} (at most {MAX_FUNCTION_IMPORTS})"
        )
    assert inside <= MAX_FUNCTION_IMPORTS, (
        f"{inside} imports of fedstats modules inside functions (at most {MAX_FUNCTION_IMPORTS}): "
        "import at module level, or move the code so that no cycle needs the import"
    )


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check itself: a graph with a cycle is reported, with its modules."""
    assert set(_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}})) == {"a", "b", "c"}
    assert _cycle({"a": {"b"}, "b": set()}) == []


MAX_MODULE_LINES = 800  # issue 41: what a maintainer reads as one module
MAX_FUNCTION_LINES = 150  # from the `def` line to the last line of the body


def _sizes() -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    modules, functions = [], []
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(SRC))
        modules.append((len(text.splitlines()), where))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert node.end_lineno is not None
                functions.append((node.end_lineno - node.lineno + 1, f"{where}::{node.name}"))
    return modules, functions


def test_no_module_or_function_is_too_long() -> None:
    modules, functions = _sizes()
    assert len(modules) > 100 and len(functions) > 1000  # the walk found the package
    long_modules = [m for m in modules if m[0] > MAX_MODULE_LINES]
    long_functions = [f for f in functions if f[0] > MAX_FUNCTION_LINES]
    assert not long_modules, (
        f"modules over {MAX_MODULE_LINES} lines: {long_modules}: split by concern"
    )
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"
