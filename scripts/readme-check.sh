#!/usr/bin/env bash
# Runs the README's install block (scripts/setup.sh) on a fresh clone of this checkout's HEAD in
# a clean HOME, the way a new user would, and checks that `opencode-bridge doctor` passes and
# that Claude Code has the bridge registered.
#
# Network: only the package registries (npm for opencode and Claude Code, crates.io for the
# build). `opencode auth login` is skipped: it needs a real provider account, so the check
# runs without a provider (doctor then reports the model unset, which is fine).
#
# Takes about 10-12 minutes on 2 cores (most of it the release build). Set
# READMECHECK_KEEP=1 to keep the scratch directory.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
scratch="$(mktemp -d /tmp/readme-check.XXXXXX)"
[ -n "${READMECHECK_KEEP:-}" ] || trap 'rm -rf "$scratch"' EXIT
git clone -q "$repo" "$scratch/clone"
home="$scratch/home"
mkdir -p "$home"
# A clean HOME, with the toolchain the machine already has (rustup's homes hold only the
# compiler and the registry cache) and npm's global prefix inside that HOME. The machine's
# network settings (proxy and CA bundle variables, when set) pass through: a fresh machine on
# the same network has them too.
net=()
for v in HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy NODE_EXTRA_CA_CERTS \
  SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE GIT_SSL_CAINFO CARGO_HTTP_CAINFO; do
  if [ -n "${!v:-}" ]; then net+=("$v=${!v}"); fi
done
env -i "${net[@]}" \
  HOME="$home" \
  PATH="$home/.npm-global/bin:$home/.cargo/bin:${CARGO_HOME:-$HOME/.cargo}/bin:/usr/local/bin:/usr/bin:/bin" \
  RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
  CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" \
  CARGO_INSTALL_ROOT="$home/.cargo" \
  NPM_CONFIG_PREFIX="$home/.npm-global" \
  READMECHECK_SKIP='^opencode auth login' \
  bash -c 'cd "$0" && bash scripts/setup.sh' "$scratch/clone" 2>&1 | tee "$scratch/setup.log"
test -x "$home/.cargo/bin/opencode-bridge" || { echo "readme-check: opencode-bridge was not installed" >&2; exit 1; }
grep -q "opencode-bridge" "$home/.claude.json" || { echo "readme-check: not registered with Claude Code" >&2; exit 1; }
if grep -q '^FAIL' "$scratch/setup.log"; then
  echo "readme-check: doctor reported a failure" >&2
  exit 1
fi
echo "readme-check: the README install block works on a fresh clone in a clean HOME"
