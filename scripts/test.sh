#!/usr/bin/env bash
# The test command: install everything (scripts/install.sh), lint (ruff check .), run pytest.
#
#   scripts/test.sh                         quick profile: -m "not slow"
#   scripts/test.sh tests/unit -x           extra arguments go to pytest (still the quick profile)
#   scripts/test.sh -m slow                 any -m of yours replaces the quick profile
#   scripts/test.sh -m ""                   everything
#
# The quick profile includes the reliability suite's quick profile (tests/reliability, a few
# minutes; it restarts the machine's PostgreSQL and Redis once each, see tests/reliability/README.md).
# Its figures and docs/reliability.md come from scripts/reliability.sh.
#
# Exits with pytest's exit code (5 = no tests collected), or 1 when lint fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/install.sh

echo "test: ruff check ." >&2
if ! .venv/bin/ruff check --extend-exclude .tools .; then
  echo "test: lint failed (ruff check .): fix the errors above (ruff check --fix . fixes some)" >&2
  exit 1
fi

has_markexpr=0
for arg in "$@"; do
  case "$arg" in -m | -m*) has_markexpr=1 ;; esac
done
if [ "$has_markexpr" = 0 ]; then set -- -m "not slow" "$@"; fi

echo "test: python -m pytest $*" >&2
set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "test: pytest collected no tests (exit code 5)" >&2; fi
exit "$rc"
