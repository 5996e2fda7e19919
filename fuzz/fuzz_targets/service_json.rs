#![no_main]
//! cargo-fuzz target `service_json`: see `fuzz/harness/service.rs` for what one input is.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| opencode_bridge_fuzz::service::run(data));
