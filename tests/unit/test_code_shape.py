"""The shape of the code cannot regress: every module under ``app/`` and ``workers/`` stays at
most MAX_MODULE_LINES lines and every function (nested functions counted in the one that holds
them, decorators included) at most MAX_FUNCTION_LINES. A module or function that grows past it is
split into parts with one job each (see docs/architecture.md), not given an exception here.

``python tests/unit/test_code_shape.py`` prints the largest modules and functions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "workers")
MAX_MODULE_LINES = 420
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def module_sizes() -> list[tuple[int, str]]:
    """(lines, path) of every module, largest first."""
    sizes = [(len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in _modules()]
    return sorted(sizes, reverse=True)


def function_sizes() -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function and method, largest first."""
    sizes = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                end = node.end_lineno or node.lineno
                sizes.append((end - first + 1, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(sizes, reverse=True)


def test_every_module_is_at_most_420_lines() -> None:
    offenders = [f"{path}: {lines} lines" for lines, path in module_sizes() if lines > MAX_MODULE_LINES]
    assert offenders == [], f"modules over {MAX_MODULE_LINES} lines (split them):\n" + "\n".join(offenders)


def test_every_function_is_at_most_80_lines() -> None:
    offenders = [f"{where}: {lines} lines" for lines, where in function_sizes() if lines > MAX_FUNCTION_LINES]
    assert offenders == [], f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(offenders)


def test_the_measure_sees_the_code() -> None:
    """A walk that found nothing (a moved package) would pass the two tests above vacuously."""
    assert len(module_sizes()) > 100
    assert any(where.endswith(" build") and where.startswith("app/bootstrap.py") for _, where in function_sizes())


if __name__ == "__main__":
    print("largest modules:")
    for lines, path in module_sizes()[:10]:
        print(f"  {lines:4d}  {path}")
    print("largest functions:")
    for lines, where in function_sizes()[:10]:
        print(f"  {lines:4d}  {where}")


# Composites still built of mixins (issue 27 composes them; the list may only shrink).
MIXIN_COMPOSITES: set[str] = set()
_NOT_COUNTED = {"Protocol", "Exception", "BaseException", "Enum", "StrEnum", "IntEnum", "Generic"}


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def classes_of_several_project_bases() -> set[str]:
    """"path Class" of every class with two or more bases defined under app/ or workers/, not
    counting Protocols, exceptions and enums (nor classes derived from them)."""
    classes = [(path, node) for path in _modules() for node in ast.walk(ast.parse(path.read_text(), str(path)))
               if isinstance(node, ast.ClassDef)]
    bases = {node.name: {_base_name(b) for b in node.bases} for _, node in classes}
    excluded = set(_NOT_COUNTED)
    grew = True
    while grew:  # a class derived from a Protocol, an exception or an enum is one too
        before = len(excluded)
        excluded |= {name for name, its in bases.items() if its & excluded}
        grew = len(excluded) > before
    project = set(bases) - excluded
    return {f"{path.relative_to(ROOT)} {node.name}" for path, node in classes
            if len({_base_name(b) for b in node.bases} & project) >= 2}


def test_classes_are_composed_not_mixed_in() -> None:
    """No class under app/ has two or more project base classes (Protocols, exceptions and enums
    aside): a service is built of parts it holds, each named for what it does."""
    assert classes_of_several_project_bases() == MIXIN_COMPOSITES
