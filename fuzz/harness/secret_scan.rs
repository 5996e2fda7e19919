//! Harness of the `secret_scan` target: the secret guard (`bridge_policy::secrets`).
//!
//! One input is any bytes, read as lossy UTF-8 text. Checked besides "no panic": `scan` agrees
//! with the first of `findings`, every finding's line exists in the text, `redact` leaves no
//! span `secret_spans` reported, and an input grown to 100 KB (the input repeated) is scanned
//! within a time bound, wall time, checked in every run (the CI smoke run too):
//!
//! - 250 ms in an optimised build without debug assertions: the guard takes about 4-6 ms on
//!   100 KB there (bench), the slowest shapes tried about 50 ms (a prompt that is all findings).
//! - 5 s with debug assertions (`scripts/fuzz.sh` builds with `-a`). Measured in that build on
//!   2026-12-01 (load average 7): the slowest shapes tried (`key: AKIA…` or `password = "…"` on
//!   every line, `--password ` repeated) took about 0.2 s of CPU and 0.35 s of wall time, the
//!   kept slow inputs (`regress-slow-*`) about 0.1 s (each run's start-up, compiling the rules,
//!   taken off). 5 s leaves room for an ASan build (2-3x) on a 2-core machine shared with other
//!   builds (4x and more), stays under libFuzzer's `-timeout=10` of `scripts/fuzz.sh`, and still
//!   catches a quadratic rescan: the fixed secret-word input took 11 s in this build, `;a=`
//!   repeated 38 s even in release. Slower constant factors are the bench's to show
//!   (`cargo run --release -p bridge-bench -- --only secrets`), not this bound's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bridge_policy::secrets::{Allowlist, findings, redact, scan, secret_spans};

/// Whether the 100 KB time bound is checked: on in the fuzz target (an optimised build); the
/// plain-test replay of the seeds (an unoptimised build, 30-50x slower) turns it off.
pub static TIME_BOUND: AtomicBool = AtomicBool::new(true);

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let all = findings(&text, &Allowlist::default());
    assert_eq!(scan(&text), all.first().copied());
    let lines = text.split('\n').count();
    for f in &all {
        assert!(f.line >= 1 && f.line <= lines, "line {} of {lines}", f.line);
    }
    for span in secret_spans(&text) {
        assert!(text.is_char_boundary(span.start) && text.is_char_boundary(span.end));
    }
    let _ = redact(&text);
    // an allowlist built from the input itself must not panic either
    let _ = Allowlist::parse(&text);
    if TIME_BOUND.load(Ordering::Relaxed) && !text.is_empty() && text.len() < 100 * 1024 {
        let big = text.repeat(100 * 1024 / text.len() + 1);
        let bound = if cfg!(debug_assertions) {
            Duration::from_secs(5)
        } else {
            Duration::from_millis(250)
        };
        let started = Instant::now();
        let _ = scan(&big);
        assert!(
            started.elapsed() < bound,
            "100 KB scanned in {:?}",
            started.elapsed()
        );
    }
}
