//! Process control for the bridge, in one audited place: which processes may be signalled, and
//! how.
//!
//! **Invariant: never signal a process we did not start; every signal after a start-time
//! check.** A single process is known by a [`ProcId`] (pid and start time) and signalled only
//! through [`ProcId::signal`], which first checks that the pid still has that start time, so a
//! reused pid is never hit. A process group is signalled only while its leader is known to be
//! ours: in [`tree`] after the leader's start-time check, in [`GroupChild`] while the leader is
//! not yet reaped (until then its pid, and so the group id, cannot be reused).
//!
//! - [`ident`]: [`ProcId`], the start time from `/proc/<pid>/stat`;
//! - [`info`]: what `/proc` says about one process ([`ProcInfo`]) and its age ([`BootClock`],
//!   the one place a process's elapsed time is computed);
//! - [`tree`]: descendants from the `/proc` walk (also those that left the group with `setsid`),
//!   the kill sequence (SIGTERM to the group and every known descendant, a grace, SIGKILL, a
//!   sweep of known descendants), subreaping;
//! - [`group`]: a child leading its own process group, stopped and reaped on every path;
//! - [`deadline`]: deadlines from durations that come from outside, which never panic;
//! - [`capture`]: a short command in its own group, with a timeout and capped output;
//! - [`stream`]: bounded buffers for a long run's output (its head and tail, lines cut from
//!   chunks, results cut to their character limits);
//! - [`env`](mod@env): [`DROPPED_ENV`], the variables a child opencode must not inherit;
//! - [`image`]: the pages of the bridge's own executable only the dynamic loader needed (its
//!   relocation table), given back at start;
//! - [`sched`]: a short scheduler slice for the thread that answers calls, which threads and
//!   processes it starts do not inherit, and a higher nice value for the runs.
//!
//! Depends on no crate of the bridge; Linux only (`/proc`).

#![deny(missing_docs)]

pub mod capture;
pub mod deadline;
pub mod env;
pub mod group;
pub mod ident;
pub mod image;
pub mod info;
pub mod sched;
pub mod stream;
pub mod tree;

pub use capture::{CaptureError, CaptureLimits, Captured, run_capture};
pub use env::{DROPPED_ENV, dropped_names, kept, provider_key_names};
pub use group::GroupChild;
pub use ident::{ProcId, start_time};
pub use info::{BootClock, ProcInfo};
pub use tree::{
    become_subreaper, reap_if_our_zombie, refresh_known, refresh_known_recent, stop_left_group,
    sweep, terminate_tree,
};
