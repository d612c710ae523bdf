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
