//! Supervises delegated `opencode run` tasks.
//!
//! - [`Supervisor`]: start a [`TaskSpec`] (returns a [`TaskId`] at once), then `status`,
//!   `result`, `wait`, `wait_for` (any or all of several, with a timeout), `cancel`, `list`,
//!   `shutdown`. Each run is `opencode run --format json`
//!   in its own process group, in the task's directory (also as `PWD`, which opencode 1.18
//!   uses instead of the real cwd), with the prompt on stdin (or in an attached file when it is
//!   over ~100 KB).
//! - [`events`]: the tolerant parser of opencode's JSON event lines.
//! - [`classify`](mod@classify): failure kinds, the provider's message and advice.
//! - [`proctable`]: every opencode process on the machine, from `/proc`.
//! - [`registry`]: the durable task registry in the state directory, so tasks, their outcome and
//!   output survive a bridge restart (clean or `kill -9`), and runs that outlived their bridge
//!   show as orphaned and can still be cancelled.
//! - [`changes`]: the files an editing task changed, with a short diff stat.
//! - [`footprint`]: a bounded stat snapshot of a read-only run's tree, `.git/` and ignored
//!   paths included, compared after the run (the audit).
//! - [`git`]: every git command the bridge runs, built so that nothing of a repository
//!   (fsmonitor, hooks, filter and diff drivers, pager) runs in the bridge.
//! - [`audit`]: the post-run audit: what a run's session used (agent, model, tool calls) and
//!   what changed in a read-only agent's tree, against what the task asked; fails closed.
//! - [`worktree`]: `isolation: "worktree"`, an editing task in a detached git worktree of its
//!   own, its change applied to the caller's checkout (or discarded) when asked.
//! - [`utc`]: UTC instants as RFC 3339 text and back.
//!
//! `changes`, `footprint`, `git`, `protect`, `audit` and `worktree` are `bridge-isolation`'s,
//! `usage`, `quota` and `utc` are `bridge-ledger`'s and `proctable` is `opencode-client`'s,
//! re-exported here under their old paths.
//! - [`argv`]: the one builder of a run's command line, for both runners: every value is one
//!   `--name=value` element, so no caller string is ever read as an option.
//!
//! Architecture invariant: only processes this crate started (and their descendants) are ever
//! signalled, each after checking its start time. Every signal goes through `bridge-proc`
//! ([`ProcId`], `bridge_proc::terminate_tree`), where that check lives.

#![deny(unsafe_code)]

pub mod argv;
/// Bounded output buffers (from `bridge-proc`).
pub use bridge_proc::stream as capture;
pub mod classify;
pub mod command;
mod error;
/// The opencode process table, read from `/proc` (from `opencode-client`).
pub use opencode_client::proctable;
pub mod registry;
mod runner;
/// Isolation and integrity (from `bridge-isolation`).
pub use bridge_isolation::{audit, changes, footprint, git, protect, worktree};
/// Quota windows (from `bridge-ledger`).
pub use bridge_ledger::quota;
/// Claude Code as a runner (`claude -p`): its launch, stream, classification and checks.
pub use runner::claude::code as claude;
/// How a finished `opencode run` attempt is judged (its events, stderr and exit), for callers
/// such as the fuzz harness.
pub use runner::opencode::classify::classify as classify_run;
/// opencode's `run --format json` events and the summary every runner's output is folded into.
pub use runner::opencode::events;
mod spec;
mod supervisor;
mod task;
/// What tasks use and cost, the ledger, budgets and reservations (from `bridge-ledger`).
pub use bridge_ledger::usage;
/// UTC instants (from `bridge-ledger`).
pub use bridge_ledger::utc;
pub mod verify;

pub use bridge_fence::Sandbox;
pub use bridge_proc::ProcId;
pub use capture::{Cut, cut_text};
pub use changes::{ChangeSource, ChangedFiles, FileChange};
pub use classify::{ExitInfo, Failure, FailureKind};
pub use command::Capabilities;
pub use error::StartError;
pub use events::{RunSummary, TokenUsage, ToolCall};
pub use proctable::{OpencodeProcess, ProcessKind, WarmServer};
pub use runner::Runner;
pub use runner::serve::notes::serve_watch;
pub use runner::serve::{ServerCheck, check_server, server_agents, server_client};
pub use spec::{Engine, OnExit, REQUEST_TTL, RequestKey, SupervisorConfig, TaskSpec};
pub use supervisor::{
    FINISHED_IN_MEMORY, LEARN_AFTER_FINISH, MAX_FINISHED_TASKS, Started, Supervisor,
};
pub use task::{
    CancelOutcome, Sessionless, TaskId, TaskOutput, TaskSnapshot, TaskState, WaitReport,
};
pub use worktree::Isolation;
