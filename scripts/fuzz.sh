#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ one after another (docs/FUZZING.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# SECONDS_PER_TARGET defaults to 20; TARGETs default to all of them. Installs cargo-fuzz when
# it is missing, into the test cache (FUZZ_TOOLS_DIR, default
# $OPENCODE_BRIDGE_TEST_CACHE/cargo-tools), never into ~/.cargo/bin. Only stable Rust is
# needed: RUSTC_BOOTSTRAP=1 lets it take the -Z flags cargo-fuzz passes. Builds without a sanitizer (the code under test has no unsafe) but with
# debug assertions and overflow checks. The committed seeds (fuzz/corpus/<target>) are only
# read (with the dictionary fuzz/dict/<target>.dict); new inputs go to fuzz/corpus-work/<target>, crashes to fuzz/artifacts/<target>/ (both
# git-ignored). Exits non-zero when any target found a crash.
#
# Environment: FUZZ_TARGET_DIR (build directory, default fuzz/target), FUZZ_MAX_LEN (largest
# input, default 16384).
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-20}"
if [ "$#" -gt 0 ]; then shift; fi
# secret_scan checks its 100 KB time bound in every run, the short CI smoke run included (see
# fuzz/harness/secret_scan.rs for the bound and why it is that); SECRET_SCAN_TIME_BOUND=0 leaves
# it out by hand.
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(event_lines store_rows service_json tool_args secret_scan quota_parse)
fi

export RUSTC_BOOTSTRAP=1
tools="${FUZZ_TOOLS_DIR:-${OPENCODE_BRIDGE_TEST_CACHE:-$HOME/.cache/opencode-bridge-test}/cargo-tools}"
export PATH="$tools/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz into $tools"
  cargo install cargo-fuzz --locked --root "$tools"
fi

target_dir="${FUZZ_TARGET_DIR:-$PWD/fuzz/target}"
max_len="${FUZZ_MAX_LEN:-16384}"
build=(-a -s none --target-dir "$target_dir")

echo "fuzz: building ${targets[*]}"
for t in "${targets[@]}"; do
  cargo fuzz build "${build[@]}" "$t"
done

failed=()
for t in "${targets[@]}"; do
  work="fuzz/corpus-work/$t"
  artifacts="fuzz/artifacts/$t/"
  log="fuzz/corpus-work/$t.log"
  mkdir -p "$work" "$artifacts"
  echo "fuzz: $t for ${secs}s"
  if cargo fuzz run "${build[@]}" "$t" "$work" "fuzz/corpus/$t" -- \
      -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts" -dict="fuzz/dict/$t.dict" -print_final_stats=1 >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$t")
    grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" | head -20 || true
  fi
  runs="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)"
  cov="$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 | grep -oE 'cov: [0-9]+' || true)"
  echo "fuzz: $t $status: ${runs:-?} executions in ${secs}s${cov:+, $cov} (log $log)"
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: crashes in ${failed[*]}; inputs under fuzz/artifacts/" >&2
  exit 1
fi
echo "fuzz: no crash in ${targets[*]}"
