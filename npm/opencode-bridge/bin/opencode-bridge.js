#!/usr/bin/env node
// The `opencode-bridge` command of the npm package: finds the prebuilt binary of this platform
// (the optional dependency `opencode-bridge-<os>-<cpu>` npm installed next to this package) and
// runs it with this process's arguments, environment and stdio. Claude Code stops a stdio MCP
// server with SIGINT, so SIGINT, SIGTERM and SIGHUP are passed on to the binary (which stops its
// runs before it exits); this process then exits with the binary's code, or dies of its signal.
//
// OPENCODE_BRIDGE_BINARY=<path> runs that binary instead (a build of your own, or a platform
// without a prebuilt package).
'use strict';

const { spawn } = require('node:child_process');
const path = require('node:path');
const os = require('node:os');

const OVERRIDE = 'OPENCODE_BRIDGE_BINARY';

// "<platform>-<arch>-<libc>" -> the package holding its binary. The release builds exactly these.
const PACKAGES = {
  'linux-x64-glibc': 'opencode-bridge-linux-x64',
  'linux-arm64-glibc': 'opencode-bridge-linux-arm64',
};

function fail(message, code) {
  process.stderr.write(`opencode-bridge: ${message}\n`);
  process.exit(code);
}

function libc() {
  if (process.platform !== 'linux') return 'none';
  const report = process.report && process.report.getReport();
  return report && report.header && report.header.glibcVersionRuntime ? 'glibc' : 'musl';
}

function binary() {
  const own = process.env[OVERRIDE];
  if (own) return own;
  const platform = `${process.platform}-${process.arch}-${libc()}`;
  const pkg = PACKAGES[platform];
  if (!pkg) {
    fail(
      `no prebuilt binary for this platform (${platform}; there are ${Object.keys(PACKAGES).join(', ')}): build it from source (cargo install --locked --git https://github.com/opencode-bridge/opencode-bridge opencode-bridge) and set ${OVERRIDE} to its path`,
      1,
    );
  }
  try {
    return path.join(path.dirname(require.resolve(`${pkg}/package.json`)), 'bin', 'opencode-bridge');
  } catch {
    return fail(
      `the package ${pkg} with the binary for this platform (${platform}) is not installed (optional dependencies omitted?): reinstall opencode-bridge with optional dependencies, or set ${OVERRIDE} to a binary`,
      1,
    );
  }
}

const bin = binary();

// The handlers are in place before the child exists: a signal that arrives while it starts is
// handled (after the spawn returns), never the default death of this process alone.
const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP'];
let child = null;
const forward = (signal) => {
  // The child may be gone already; its exit ends this process.
  try {
    child.kill(signal);
  } catch {}
};
for (const signal of FORWARDED) process.on(signal, forward);
child = spawn(bin, process.argv.slice(2), { stdio: 'inherit' });

child.on('error', (e) => {
  const hint = e.code === 'ENOENT' ? 'it does not exist' : e.code === 'EACCES' ? 'it is not executable' : e.message;
  fail(`cannot run ${bin} (${hint})${process.env[OVERRIDE] ? `: fix ${OVERRIDE}` : ': reinstall opencode-bridge'}`, e.code === 'ENOENT' ? 127 : 126);
});

child.on('exit', (code, signal) => {
  if (signal) {
    // Die of the same signal, so whoever started us sees what happened to the binary.
    for (const s of FORWARDED) process.removeListener(s, forward);
    process.kill(process.pid, signal);
    // Still here (a signal Node keeps handling): the shell's convention.
    process.exit(128 + (os.constants.signals[signal] || 0));
  }
  process.exit(code === null ? 1 : code);
});
