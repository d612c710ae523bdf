"""The layering, enforced: arrows run from the edges (s3, admin, workers) through services to
adapters and domain, never back up, and only the composition root (app/bootstrap.py) builds
adapters. Walks the source with ``ast``, so lazy imports inside functions count too."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"


def _modules(under: Path) -> list[Path]:
    return sorted(under.rglob("*.py"))


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def _hits(under: Path, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{path.relative_to(ROOT)} imports {name}" for path in _modules(under) for name in _imports(path)
            if any(name == f or name.startswith(f + ".") for f in forbidden)]


def test_the_tree_is_there() -> None:
    """Guards the other tests against walking an empty or moved tree."""
    assert len(_modules(APP)) > 50 and (APP / "bootstrap.py").exists() and (APP / "domain").is_dir()


def test_app_never_imports_workers() -> None:
    assert _hits(APP, ("workers",)) == []


def test_services_never_import_the_edges() -> None:
    assert _hits(APP / "services", ("app.s3", "app.admin", "app.main", "app.bootstrap")) == []


def test_adapters_never_import_services_or_edges() -> None:
    assert _hits(APP / "adapters", ("app.services", "app.s3", "app.admin", "app.main", "app.bootstrap")) == []


def test_domain_imports_nothing_of_the_project() -> None:
    project = ("app.adapters", "app.services", "app.s3", "app.admin", "app.main", "app.bootstrap", "app.config",
               "app.metrics", "workers")
    assert _hits(APP / "domain", project) == []
    outside = [f"{p.relative_to(ROOT)} imports {n}" for p in _modules(APP / "domain") for n in _imports(p)
               if (n == "app" or n.startswith("app.")) and not n.startswith("app.domain")]
    assert outside == []


def test_the_s3_edge_never_imports_adapters() -> None:
    assert _hits(APP / "s3", ("app.adapters",)) == []


def _adapter_classes_called(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module and node.module.startswith("app.adapters") for alias in node.names}
    return [f"{path.relative_to(ROOT)}:{node.lineno} builds {node.func.id}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported
            and node.func.id[:1].isupper() and node.func.id.endswith(("Repo", "Queries", "Stats", "Store", "Index",
                                                                       "Journal", "Catalog"))]


@pytest.mark.parametrize("edge", ["admin", "s3"])
def test_only_bootstrap_builds_adapters(edge: str) -> None:
    """Routers and the S3 edge use what the composition root put on the Container."""
    assert [hit for path in _modules(APP / edge) for hit in _adapter_classes_called(path)] == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The project modules ``path`` imports when it runs: every import, those inside functions
    too, except under ``if TYPE_CHECKING:`` (never executed). ``from a import b`` names the
    module ``a.b`` when there is one, else ``a``."""
    tree = ast.parse(path.read_text(), str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    # an import of a.b.c runs a and a.b first, but those are the packages' faces: count the module
    return {name for name in found if name in modules and name != _module_name(path)}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_no_import_cycles_counting_imports_inside_functions() -> None:
    """A cycle of runtime imports (lazy ones too) means two modules cannot be read, tested or
    moved apart; type-only imports under TYPE_CHECKING do not count."""
    paths = _modules(APP) + _modules(ROOT / "workers")
    modules = {_module_name(p) for p in paths}
    graph = {_module_name(p): _runtime_imports(p, modules) for p in paths}
    assert _cycles(graph) == []


def test_only_the_cache_store_touches_block_files() -> None:
    """Block I/O lives in ``adapters/local/cachestore`` and the ``BlockReader`` it hands out (issue 27): the
    read cache never opens, preads or maps a block file, nor knows where its bytes start."""
    raw_io = {"open", "pread", "pwrite", "dup", "sendfile", "mmap"}
    found = []
    for path in _modules(APP / "services"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in ("os", "mmap") and node.attr in raw_io):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value.id}.{node.attr}")
        found += [f"{path.relative_to(ROOT)} imports {name}" for name in _imports(path)
                  if name in ("mmap", "app.adapters.local.blockformat")]
    assert found == []
