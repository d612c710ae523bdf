#!/usr/bin/env bash
# The reliability suite in one command: the fault suite (tests/reliability) and the security and
# bad-input suites, every test marked `reliability`; their records become docs/reliability.md.
#
#   scripts/reliability.sh --quick            bounded (a few minutes; also part of scripts/test.sh)
#   scripts/reliability.sh --soak 30m         kill -9 rounds for at least 30 min (s, m or h; >= 20 rounds)
#   scripts/reliability.sh --quick -x         further arguments go to pytest
#
# Environment: PYTHON (default .venv/bin/python), FERRY_RELIABILITY_REPORT (default
# docs/reliability.md; "-" prints it), FERRY_SKIP_SERVICE_RESTARTS=1 skips the tests that restart
# the machine's PostgreSQL and Redis. Exits with pytest's exit code.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-.venv/bin/python}"
REPORT="${FERRY_RELIABILITY_REPORT:-docs/reliability.md}"
COMMAND="scripts/reliability.sh $*"

profile=quick
seconds=0
case "${1:-}" in
  --quick) shift ;;
  --soak)
    profile=soak
    duration="${2:?--soak needs a duration: 600s, 30m, 2h}"
    shift 2
    case "$duration" in
      *h) seconds=$(( ${duration%h} * 3600 )) ;;
      *m) seconds=$(( ${duration%m} * 60 )) ;;
      *s) seconds=${duration%s} ;;
      *) seconds=$duration ;;
    esac ;;
  -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
esac

OUT="$(mktemp -d "${TMPDIR:-/tmp}/ferry-reliability.XXXXXX")"
export FERRY_RELIABILITY_OUT="$OUT"
export FERRY_REQUIRE_SERVICES="${FERRY_REQUIRE_SERVICES:-1}"
args=(-m reliability -p no:cacheprovider -q -rfE)
if [ "$profile" = soak ]; then
  export FERRY_RELIABILITY_SECONDS="$seconds" FERRY_RELIABILITY_ROUNDS="${FERRY_RELIABILITY_ROUNDS:-20}"
  args+=(--timeout "$(( seconds + 1800 ))")
fi

started=$(date +%s)
echo "reliability: $profile profile; records in $OUT" >&2
set +e
"$PYTHON" -m pytest "${args[@]}" "$@" tests
rc=$?
set -e
if [ "$REPORT" = "-" ]; then
  "$PYTHON" scripts/reliability_report.py "$OUT" --profile "$profile" --started "$started" \
    --command "$COMMAND" --pytest-exit "$rc"
else
  "$PYTHON" scripts/reliability_report.py "$OUT" --profile "$profile" --started "$started" \
    --command "$COMMAND" --pytest-exit "$rc" > "$REPORT"
  echo "reliability: wrote $REPORT" >&2
fi
exit "$rc"
