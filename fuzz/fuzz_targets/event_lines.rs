#![no_main]
//! cargo-fuzz target `event_lines`: see `fuzz/harness/events.rs` for what one input is.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| opencode_bridge_fuzz::events::run(data));
