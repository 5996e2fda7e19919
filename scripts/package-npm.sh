#!/usr/bin/env bash
# Writes the npm packages of opencode-bridge to DIR as tarballs (npm pack): the launcher
# `opencode-bridge` (npm/opencode-bridge) and one package per platform with its binary
# (npm/opencode-bridge-<platform>).
#
#   scripts/package-npm.sh DIR                       # builds the release binary of this machine
#                                                    # (linux-x64 here) and packs it
#   scripts/package-npm.sh DIR linux-arm64=PATH ...  # packs binaries built elsewhere (the release
#                                                    # workflow, one per platform)
#
# The packages' versions are locked to the workspace version (Cargo.toml): the script refuses to
# pack when a package.json under npm/ says another (bins/opencode-bridge/tests/plugin.rs checks
# the same, with the plugin's).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -lt 1 ]; then
  echo "usage: scripts/package-npm.sh DIR [PLATFORM=BINARY]..." >&2
  exit 2
fi
mkdir -p "$1"
out="$(cd "$1" && pwd)"
shift

version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")"
[ -n "$version" ] || { echo "package-npm.sh: no version in [workspace.package] of Cargo.toml" >&2; exit 1; }
for manifest in "$repo"/npm/*/package.json; do
  node -e '
    const [file, version] = process.argv.slice(1);
    const p = require(file);
    const deps = Object.entries(p.optionalDependencies || {}).filter(([, v]) => v !== version);
    if (p.version !== version || deps.length) {
      console.error(`package-npm.sh: ${file} says ${p.version}${deps.length ? ` (and ${deps.map(([n, v]) => `${n}@${v}`).join(", ")})` : ""}, the workspace is ${version}: set every npm/*/package.json version (and the launcher optionalDependencies) to ${version}`);
      process.exit(1);
    }' "$manifest" "$version"
done

declare -A binaries=()
if [ $# -eq 0 ]; then
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) host=linux-x64 ;;
    Linux-aarch64) host=linux-arm64 ;;
    *) echo "package-npm.sh: no npm package for this machine ($(uname -s)-$(uname -m)); pass PLATFORM=BINARY" >&2; exit 1 ;;
  esac
  (cd "$repo" && cargo build --release --locked -p opencode-bridge)
  binaries[$host]="${CARGO_TARGET_DIR:-$repo/target}/release/opencode-bridge"
else
  for arg in "$@"; do
    binaries[${arg%%=*}]="${arg#*=}"
  done
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
pack() { # package-dir
  (cd "$1" && npm pack --silent --pack-destination "$out" >/dev/null)
}
for platform in "${!binaries[@]}"; do
  src="$repo/npm/opencode-bridge-$platform"
  [ -d "$src" ] || { echo "package-npm.sh: no package npm/opencode-bridge-$platform for $platform" >&2; exit 1; }
  bin="${binaries[$platform]}"
  [ -x "$bin" ] || { echo "package-npm.sh: $bin (for $platform) is not an executable file" >&2; exit 1; }
  cp -r "$src" "$stage/$platform"
  mkdir -p "$stage/$platform/bin"
  cp "$bin" "$stage/$platform/bin/opencode-bridge"
  chmod 755 "$stage/$platform/bin/opencode-bridge"
  pack "$stage/$platform"
done
cp -r "$repo/npm/opencode-bridge" "$stage/launcher"
cp "$repo/LICENSE" "$stage/launcher/"
chmod 755 "$stage/launcher/bin/opencode-bridge.js"
pack "$stage/launcher"
ls "$out"/*.tgz
