#!/usr/bin/env bash
# The test command: install everything (scripts/install.sh), lint (ruff check .), type-check (mypy),
# run pytest.
#
#   scripts/test.sh                         quick profile: -m "not slow"
#   scripts/test.sh tests/unit -x           extra arguments go to pytest (still the quick profile)
#   scripts/test.sh -m slow                 any -m of yours replaces the quick profile
#   scripts/test.sh -m ""                   everything
#   FERRY_TEST_WORKERS=0 scripts/test.sh    one pytest process, no parallel pass (default: 3 workers)
#
# The quick profile includes the reliability suite's quick profile (tests/reliability, a few
# minutes; it restarts the machine's PostgreSQL and Redis once each, see tests/reliability/README.md).
# Its figures and docs/reliability.md come from scripts/reliability.sh.
#
# Exits with pytest's exit code (5 = no tests collected), or 1 when lint or the type check fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

bash scripts/install.sh

echo "test: ruff check ." >&2
if ! .venv/bin/ruff check --extend-exclude .tools .; then
  echo "test: lint failed (ruff check .): fix the errors above (ruff check --fix . fixes some)" >&2
  exit 1
fi

echo "test: mypy (app/ and workers/, [tool.mypy] in pyproject.toml)" >&2
if ! .venv/bin/mypy; then
  echo "test: type check failed (mypy): fix the errors above" >&2
  exit 1
fi

# The marker expression: yours (-m EXPR / -mEXPR), else the quick profile's "not slow".
markexpr="not slow"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) markexpr="${2-}"; shift 2 || shift ;;
    -m*) markexpr="${1#-m}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
set -- ${args[@]+"${args[@]}"}

# Parallel pass: FERRY_TEST_WORKERS pytest-xdist workers (default 3: the tests mostly wait on the
# processes they start), whole files per worker so each module's gateway is started once. Each
# worker has its own PostgreSQL database and Redis database (tests/conftest.py). Tests that restart
# the machine's PostgreSQL or Redis (marker restarts_services) would pull the services from under
# the other workers, so they run afterwards, alone. FERRY_TEST_WORKERS=0 runs everything in one
# process, in one pass.
workers="${FERRY_TEST_WORKERS:-3}"
serial_only="restarts_services"
if [ -n "$markexpr" ]; then scoped() { echo "($markexpr) and $1"; }; else scoped() { echo "$1"; }; fi

run_pytest() {
  echo "test: python -m pytest $*" >&2
  .venv/bin/python -m pytest -p no:cacheprovider "$@"
}

set +e
if [ "$workers" = 0 ]; then
  run_pytest -m "$markexpr" "$@"
  rc=$?
else
  run_pytest -n "$workers" --dist loadfile --durations=30 -m "$(scoped "not $serial_only")" "$@"
  rc=$?
  run_pytest -m "$(scoped "$serial_only")" "$@"
  rc_serial=$?
  if [ "$rc_serial" -ne 5 ] && { [ "$rc" -eq 0 ] || [ "$rc" -eq 5 ]; }; then rc=$rc_serial; fi
fi
set -e
if [ "$rc" -eq 5 ]; then echo "test: pytest collected no tests (exit code 5)" >&2; fi
exit "$rc"
