#![no_main]
//! cargo-fuzz target `quota_parse`: see `fuzz/harness/quota.rs` for what one input is.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| opencode_bridge_fuzz::quota::run(data));
