//! Every text the opencode-bridge tools and CLI subcommands return: compact, aligned plain text
//! with humanised times and sizes. Pure functions of plain values; the current time is an
//! argument so the output is reproducible.

pub mod args;
pub mod chart;
pub mod hook;
pub mod human;
pub mod isolation;
pub mod policy;
pub mod root_check;
pub mod sessions;
pub mod tasks;
pub mod usage;

pub use args::{ArgError, ArgProblem};
pub use policy::{WELL_KNOWN_AGENTS, instructions, policy, roster_summary};
pub use sessions::{OutputMode, renamed, session_header, session_list, transcript};
