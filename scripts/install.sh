#!/usr/bin/env bash
# Install Ferry and everything its tests use into .venv (and the AWS CLI into .tools/awscli).
# Idempotent: a second run only checks. Needs Python >= 3.11 with venv (Debian: python3-venv).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
log() { printf 'install: %s\n' "$*" >&2; }

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  log "Python >= 3.11 is required ($("$PYTHON" --version 2>&1) found)"; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$PYTHON" -m venv .venv || { log "python3 -m venv failed: on Debian/Ubuntu run: apt-get install python3-venv"; exit 1; }
  .venv/bin/python -m pip install -q --upgrade pip
fi

stamp=.venv/.ferry-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  log "installing ferry with its test dependencies into .venv"
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi

# AWS CLI v1 pins its own botocore: it lives in its own venv so boto3 stays the latest.
if [ "${FERRY_SKIP_AWSCLI:-}" != 1 ]; then
  if [ ! -x .tools/awscli/bin/aws ]; then
    log "installing the AWS CLI into .tools/awscli"
    "$PYTHON" -m venv .tools/awscli
    .tools/awscli/bin/python -m pip install -q --upgrade pip
    .tools/awscli/bin/python -m pip install -q awscli
  fi
  ln -sf "$PWD/.tools/awscli/bin/aws" .venv/bin/aws
fi
log "ready: $(.venv/bin/ferry version)"
