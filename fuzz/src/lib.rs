//! Fuzz harnesses of opencode-bridge (see `docs/FUZZING.md`). Each module's `run(&[u8])` is one
//! cargo-fuzz target; the files under `harness/` are also compiled by the corpus replay tests of
//! the crates they exercise, so plain `cargo test` runs every committed seed.

#[path = "../harness/events.rs"]
pub mod events;
#[path = "../harness/quota.rs"]
pub mod quota;
#[path = "../harness/secret_scan.rs"]
pub mod secret_scan;
#[path = "../harness/service.rs"]
pub mod service;
#[path = "../harness/store.rs"]
pub mod store;
#[cfg(not(test))]
#[path = "../harness/tool_args.rs"]
pub mod tool_args;

/// The binary's tool definitions and argument validation, compiled here by path (the binary
/// has no library target). That file needs only crates this one depends on (`serde_json`,
/// `bridge-policy`, `bridge-render`, `run-supervisor`), except for its own unit tests (they
/// need the binary's dev-dependencies), hence not under `cfg(test)`.
#[cfg(not(test))]
#[path = "../../bins/opencode-bridge/src/tools/mod.rs"]
#[allow(dead_code, unused_imports)]
mod tools;
