"""The migration files sort in the order of their chain: a maintainer reading
``migrations/versions/`` top to bottom reads the schema's history in order."""

from __future__ import annotations

import re
from pathlib import Path

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"


def _chain() -> list[tuple[str, str]]:
    """(revision, file name) from the base to the head, following down_revision."""
    by_down: dict[str | None, tuple[str, str]] = {}
    for path in VERSIONS.glob("*.py"):
        text = path.read_text()
        rev = re.search(r"^revision = '([^']+)'", text, re.M)
        down = re.search(r"^down_revision = (?:None|'([^']+)')", text, re.M)
        assert rev and down, path.name
        assert down.group(1) not in by_down, f"two migrations follow {down.group(1)}: a branch"
        by_down[down.group(1)] = (rev.group(1), path.name)
    chain, current = [], None
    while current in by_down:
        chain.append(by_down[current])
        current = chain[-1][0]
    assert len(chain) == len(by_down), "every migration is on the one chain"
    return chain


def test_file_names_sort_in_chain_order_and_name_their_place_and_revision() -> None:
    chain = _chain()
    assert [name for _, name in chain] == sorted(name for _, name in chain)
    for place, (rev, name) in enumerate(chain, 1):
        assert name.startswith(f"{place:04d}_{rev}_"), name
