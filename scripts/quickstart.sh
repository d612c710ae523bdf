#!/usr/bin/env bash
# Install Ferry and run it in front of a local SeaweedFS "remote region"; prints endpoint and keys.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what running needs (the project, SeaweedFS, the AWS CLI): `scripts/test.sh` installs the rest.
FERRY_INSTALL_PROFILE=run FERRY_SKIP_AWSCLI="${FERRY_SKIP_AWSCLI:-0}" bash scripts/install.sh
exec .venv/bin/ferry quickstart "$@"
