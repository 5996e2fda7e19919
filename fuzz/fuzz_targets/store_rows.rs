#![no_main]
//! cargo-fuzz target `store_rows`: see `fuzz/harness/store.rs` for what one input is.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| opencode_bridge_fuzz::store::run(data));
