#!/usr/bin/env bash
# The test command: install everything, lint, run the quick test profile (extra args go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
.venv/bin/ruff check .
if [ "$#" -eq 0 ]; then set -- -m "not slow"; fi
set +e
.venv/bin/python -m pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "test.sh: no tests were collected" >&2; exit 1; fi
exit "$rc"
