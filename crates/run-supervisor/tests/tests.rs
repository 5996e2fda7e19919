//! The integration tests of this crate, one test binary (each module was a binary of its own;
//! one binary links the crate once instead of once per file).

mod claude_live;
mod common;
mod durable;
mod fuzz_corpus;
mod git_fence;
mod live_ambient;
mod live_audit;
mod live_fence;
mod live_long_output;
mod live_opencode;
mod live_opencode2;
mod live_serve;
mod live_usage;
mod live_worlds;
mod process_tree;
mod read_only_writes;
mod serve_placement;
