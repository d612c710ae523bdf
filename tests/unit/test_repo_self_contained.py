"""The benchmark and the documentation stand on the repository alone (issue 16): nothing in docs/,
bench/ or the README points at a file outside it, such as a sibling checkout's design notes or a path
on the machine the project was written on. A figure that came from outside is described in words."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("docs", "bench", "README.md")
TEXT = {".md", ".py", ".c", ".txt", ".yml", ".yaml", ".json", ".toml", ".cfg", ".ini", ".sh", ""}
SKIP_DIRS = {"results", "__pycache__"}  # bench/results: the benchmark's own output, not in git
OUTSIDE = re.compile(r"\.\./shared|(?<![\w.-])shared/|DESIGN\.md|(?<![\w.])/(?:work|home|Users|root)/")
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def scanned_files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        out += [p for p in candidates if p.is_file() and p.suffix in TEXT
                and not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return out


def outside_references(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line: text`` of every line naming something outside the repository ``root``."""
    found = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        hits = [m.group(0) for m in OUTSIDE.finditer(line)]
        if path.suffix == ".md":
            for target in MD_LINK.findall(line):
                if "://" in target or target.startswith("mailto:"):
                    continue
                resolved = (path.parent / target).resolve()
                if not resolved.is_relative_to(root):
                    hits.append(f"link to {target}")
        found += [f"{path.relative_to(root)}:{n}: {hit}" for hit in hits]
    return found


def test_docs_bench_and_readme_point_only_inside_the_repository() -> None:
    offenders = [hit for path in scanned_files() for hit in outside_references(path)]
    assert offenders == [], "references outside the repository:\n" + "\n".join(offenders)


def test_the_scan_sees_the_files_and_catches_what_it_should(tmp_path: Path) -> None:
    names = {str(p.relative_to(ROOT)) for p in scanned_files()}
    assert {"README.md", "docs/benchmarks.md", "bench/__main__.py", "bench/netsim/README.md"} <= names
    (tmp_path / "docs").mkdir()
    bad = tmp_path / "docs" / "page.md"
    bad.write_text("see ../shared/DESIGN.md\nthe ceiling in [notes](../../elsewhere/x.md)\n"
                   "run /work/main/.venv/bin/python\nfine: cache/tmp/, /tmp/flame, bench/fleet_shared.py, "
                   "[plots](benchmarks/a.png), [up](../README.md)\n")
    hits = outside_references(bad, root=tmp_path)
    assert [h.split(":")[1] for h in hits] == ["1", "1", "2", "3"], hits
