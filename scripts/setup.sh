#!/usr/bin/env bash
# The README's main set-up command: runs the README's install block (between the
# <!-- install-block --> markers) top to bottom, so the README and this script cannot drift.
#
# READMECHECK_SKIP: a regular expression; install-block lines matching it are skipped (the
# README check skips `opencode auth login`, which needs a real provider account).
set -euo pipefail
cd "$(dirname "$0")/.."
block="$(sed -n '/<!-- install-block -->/,/<!-- \/install-block -->/p' README.md | sed '/^```/d;/<!--/d')"
if [ -z "$block" ]; then
  echo "setup.sh: README.md has no install block" >&2
  exit 1
fi
if [ -n "${READMECHECK_SKIP:-}" ]; then
  block="$(printf '%s\n' "$block" | grep -Ev "$READMECHECK_SKIP")"
fi
printf '%s\n' "$block" | bash -euxo pipefail
