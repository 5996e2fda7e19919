#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs the pinned real binaries the live tests use
# (opencode from npm, Claude Code from npm, verdaccio from npm) into a cache outside the checkout, then runs formatting,
# lints and every test. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENCODE_VERSION=1.18.33
# The OpenCode 2.0 preview (`lildax`), the v2 line the bridge also speaks (docs/API-NOTES.md
# "opencode 2"); its npm version number is the preview's, not opencode 1's.
OPENCODE2_VERSION=1.18.18
CLAUDE_CODE_VERSION=2.1.328
# A throwaway local npm registry the packaging test publishes the npm packages to (no uplinks).
VERDACCIO_VERSION=6.8.0
cache="${OPENCODE_BRIDGE_TEST_CACHE:-$HOME/.cache/opencode-bridge-test}"
mkdir -p "$cache"

install_npm() { # dir package@version binary-path
  local dir="$1" pkg="$2" bin="$3"
  if [ ! -x "$dir/$bin" ] || ! grep -q "\"version\": \"${pkg##*@}\"" "$dir/node_modules/${pkg%@*}/package.json" 2>/dev/null; then
    echo "test.sh: installing $pkg into $dir" >&2
    npm install --no-audit --no-fund --loglevel=error --prefix "$dir" "$pkg" >&2
  fi
}
install_npm "$cache/oc" "opencode-ai@$OPENCODE_VERSION" node_modules/opencode-linux-x64/bin/opencode
install_npm "$cache/oc2" "@opencode-ai/cli-linux-x64@$OPENCODE2_VERSION" node_modules/@opencode-ai/cli-linux-x64/bin/lildax
install_npm "$cache/cc" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" node_modules/.bin/claude
install_npm "$cache/verdaccio" "verdaccio@$VERDACCIO_VERSION" node_modules/.bin/verdaccio

# The Python MCP SDK, an independent client for tests/protocol.rs (tests/python/): a venv in the
# cache, pinned like the npm packages.
PY_MCP_VERSION=2.3.0
PY_JSONSCHEMA_VERSION=4.26.0
if ! "$cache/pymcp/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$PY_MCP_VERSION' or m.version('jsonschema') != '$PY_JSONSCHEMA_VERSION')" 2>/dev/null; then
  echo "test.sh: installing mcp==$PY_MCP_VERSION (Python MCP SDK) into $cache/pymcp" >&2
  python3 -m venv "$cache/pymcp"
  "$cache/pymcp/bin/pip" install --quiet --disable-pip-version-check \
    "mcp==$PY_MCP_VERSION" "jsonschema==$PY_JSONSCHEMA_VERSION" >&2
fi

# Headless Chromium (Debian's `chromium`) opens the `usage --html` page in a test and checks its
# screenshot for the chart's bars.
if ! command -v chromium >/dev/null 2>&1; then
  echo "test.sh: installing chromium (apt-get)" >&2
  if [ "$(id -u)" = 0 ]; then apt-get install -y --no-install-recommends chromium >&2
  else sudo apt-get install -y --no-install-recommends chromium >&2; fi
fi

# cargo-nextest runs each test in a process of its own (the process-tree tests count zombie
# children, which tests sharing one process would leave each other) and honours the live tests'
# group limits in .config/nextest.toml. One already on the machine is used; otherwise a pinned
# one is built from crates.io once per machine, into the test cache (like cargo-fuzz), never
# into ~/.cargo/bin.
NEXTEST_VERSION=0.9.151
export PATH="$PATH:$cache/cargo-tools/bin"
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: installing cargo-nextest $NEXTEST_VERSION into $cache/cargo-tools" >&2
  cargo install --locked --quiet --root "$cache/cargo-tools" "cargo-nextest@$NEXTEST_VERSION" >&2
fi

export OPENCODE_BRIDGE_TEST_OPENCODE="$cache/oc/node_modules/opencode-linux-x64/bin/opencode"
export OPENCODE_BRIDGE_TEST_OPENCODE2="$cache/oc2/node_modules/@opencode-ai/cli-linux-x64/bin/lildax"
export OPENCODE_BRIDGE_TEST_CLAUDE="$cache/cc/node_modules/.bin/claude"
export OPENCODE_BRIDGE_TEST_VERDACCIO="$cache/verdaccio/node_modules/.bin/verdaccio"
export OPENCODE_BRIDGE_TEST_CACHE="$cache"
"$OPENCODE_BRIDGE_TEST_OPENCODE" --version >/dev/null
"$OPENCODE_BRIDGE_TEST_OPENCODE2" --help >/dev/null
"$OPENCODE_BRIDGE_TEST_CLAUDE" --version >/dev/null

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Fake helper binaries (fake opencode, ...) are exec'd by tests of other crates.
cargo build --workspace --bins --locked
# A short fuzz run of every target (cargo-fuzz on stable via RUSTC_BOOTSTRAP; docs/FUZZING.md).
FUZZ_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/fuzz" bash scripts/fuzz.sh 15
cargo nextest run --workspace --locked --no-fail-fast
cargo test --workspace --doc --locked
# Benchmarks in quick mode: figures only (docs/PERFORMANCE.md), never a failure on time.
cargo run --release -p bridge-bench --locked -- --quick
