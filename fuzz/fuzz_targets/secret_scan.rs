#![no_main]
//! cargo-fuzz target `secret_scan`: see `fuzz/harness/secret_scan.rs` for what one input is.
//! `SECRET_SCAN_TIME_BOUND=0` leaves out the 100 KB time bound, by hand only: every run of
//! `scripts/fuzz.sh`, the short CI smoke run included, checks it (see docs/FUZZING.md).

use libfuzzer_sys::fuzz_target;
use std::sync::atomic::Ordering;

fuzz_target!(|data: &[u8]| {
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        if std::env::var("SECRET_SCAN_TIME_BOUND").as_deref() == Ok("0") {
            opencode_bridge_fuzz::secret_scan::TIME_BOUND.store(false, Ordering::Relaxed);
        }
    });
    opencode_bridge_fuzz::secret_scan::run(data)
});
