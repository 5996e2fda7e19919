#![no_main]
//! cargo-fuzz target `tool_args`: see `fuzz/harness/tool_args.rs` for what one input is.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| opencode_bridge_fuzz::tool_args::run(data));
