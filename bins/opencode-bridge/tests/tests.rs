//! The integration tests of this crate, one test binary (each module was a binary of its own;
//! one binary links the crate once instead of once per file).

mod audit;
mod bad_input;
mod cli;
mod common;
mod durable;
mod everyday;
mod faults;
mod first_run;
mod kill_guarantees;
mod live_argv;
mod live_claude_code;
mod live_claude_runner;
mod live_fence;
mod live_isolation;
mod live_plugin;
mod live_read_only;
mod live_remote;
mod live_roster;
mod live_untrusted;
mod live_worlds;
mod load;
mod plugin;
mod protocol;
mod tasks;
mod untrusted;
mod usage_page;
