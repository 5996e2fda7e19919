//! Harness of the `secret_scan` target: the secret guard (`bridge_policy::secrets`).
//!
//! One input is any bytes, read as lossy UTF-8 text. Checked besides "no panic": `scan` agrees
//! with the first of `findings`, every finding's line exists in the text, `redact` leaves no
//! span `secret_spans` reported, and an input grown to 100 KB (the input repeated) is scanned
//! within a generous time bound (2 s: the guard takes a few ms on 100 KB in release builds).

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
        let started = Instant::now();
        let _ = scan(&big);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "100 KB scanned in {:?}",
            started.elapsed()
        );
    }
}
