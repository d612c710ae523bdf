"""Shared entry point: atheris when installed, else replay the files given on the command line."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

try:
    import atheris
except ImportError:
    atheris = None


def instrumented() -> Any:
    """Coverage for the modules imported inside (the parsers under test), when atheris is here."""
    return atheris.instrument_imports(include=["app"]) if atheris is not None else contextlib.nullcontext()


def run(test_one_input: Callable[[bytes], None]) -> None:
    if atheris is None:
        for path in sys.argv[1:]:
            with open(path, "rb") as fh:
                test_one_input(fh.read())
        print(f"replayed {len(sys.argv) - 1} input(s) without atheris")
        return
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
