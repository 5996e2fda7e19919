//! Harness of the `secret_scan` target: the secret guard (`bridge_policy::secrets`).
//!
//! One input is any bytes, read as lossy UTF-8 text. Checked besides "no panic": `scan` agrees
//! with the first of `findings`, every finding's line exists in the text, `redact` leaves no
//! span `secret_spans` reported, and an input grown to 100 KB (the input repeated) is scanned
//! within a time bound: 250 ms in an optimised build without debug assertions (the guard takes
//! about 10 ms on 100 KB there, 30 ms on the slowest input found so far, `key=` repeated), 2 s
//! with them (`scripts/fuzz.sh` builds with `-a`: the regex engine's own debug assertions make
//! it about 20x slower; `key=` repeated took 650 ms on the loaded machine). Either catches a
//! quadratic rescan.

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
            Duration::from_secs(2)
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
