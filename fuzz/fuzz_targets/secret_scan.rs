#![no_main]
//! cargo-fuzz target `secret_scan`: see `fuzz/harness/secret_scan.rs` for what one input is.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| opencode_bridge_fuzz::secret_scan::run(data));
