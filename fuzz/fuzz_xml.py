"""atheris harness: the S3 XML request parsers (see fuzz/README.md)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

from _run import instrumented, run

with instrumented():
    from app.domain.errors import S3Error
    from app.s3.xml import parse_complete_multipart, parse_delete, parse_location_constraint

PARSERS = (parse_delete, parse_complete_multipart, parse_location_constraint)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    with contextlib.suppress(S3Error):
        PARSERS[data[0] % len(PARSERS)](data[1:])


if __name__ == "__main__":
    run(test_one_input)
