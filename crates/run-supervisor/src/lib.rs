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
pub mod capture;
pub mod classify;
pub mod command;
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

use std::path::PathBuf;

pub use bridge_fence::Sandbox;
pub use bridge_proc::ProcId;
pub use capture::{Cut, cut_text};
pub use changes::{ChangeSource, ChangedFiles, FileChange};
pub use classify::{ExitInfo, Failure, FailureKind};
pub use command::Capabilities;
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

/// Why a task was not started. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The parallel limit is reached.
    #[error(
        "{running} tasks are already running (limit OPENCODE_BRIDGE_MAX_PARALLEL={limit}): wait for one to finish or cancel one"
    )]
    Busy {
        /// Unfinished tasks.
        running: usize,
        /// The limit.
        limit: usize,
    },
    /// The server the task names already runs as many of this bridge's tasks as its
    /// `max_parallel` allows.
    #[error(
        "server {server} already runs {running} of this bridge's tasks (its max_parallel is {limit} in the config file): wait for one to finish, cancel one, or run on another server"
    )]
    ServerBusy {
        /// The server's name.
        server: String,
        /// This bridge's unfinished tasks on it.
        running: usize,
        /// Its `max_parallel`.
        limit: usize,
    },
    /// The follow-up's session is the session of an unfinished task of this bridge: a second
    /// prompt would not run beside that turn (a server queues it behind the turn; a second
    /// `opencode run` would write into it).
    #[error(
        "session {session} is in use by task {task}, which has not finished: wait for it (opencode_wait) or cancel it (opencode_cancel), then send the follow-up"
    )]
    SessionInUse {
        /// The session.
        session: String,
        /// The unfinished task working in it.
        task: TaskId,
    },
    /// The working directory resolves outside the allowed root.
    #[error("cwd {} is outside OPENCODE_BRIDGE_ROOT ({}): use a directory inside it, or start the bridge with a wider OPENCODE_BRIDGE_ROOT", cwd.display(), root.display())]
    CwdOutsideRoot {
        /// The canonical cwd.
        cwd: PathBuf,
        /// The canonical root.
        root: PathBuf,
    },
    /// The working directory does not exist or cannot be resolved.
    #[error("cwd {} cannot be used ({reason}): pass an existing directory", cwd.display())]
    CwdMissing {
        /// The cwd as given.
        cwd: PathBuf,
        /// Why.
        reason: String,
    },
    /// No opencode binary.
    #[error("{0}")]
    BinaryMissing(String),
    /// The task itself is unusable (empty prompt, no agent).
    #[error("{0}")]
    InvalidSpec(String),
    /// `OPENCODE_BRIDGE_SANDBOX=required` and this kernel cannot confine a run (the text says
    /// why and what to do).
    #[error("{0}")]
    Unconfinable(String),
    /// `shutdown` was called.
    #[error("the bridge is shutting down: no new task is started")]
    ShuttingDown,
    /// An earlier run on the same account was refused for quota or a usage limit, and its
    /// window has not reset yet.
    #[error(
        "the {account} account is out of quota or at its usage limit until {until} (an earlier run was refused): wait until then, or use a model of another provider"
    )]
    QuotaWindow {
        /// `claude` or the opencode provider.
        account: String,
        /// When the window resets (UTC, RFC 3339).
        until: String,
    },
    /// A budget is spent, or the start's reservation would pass it ([`usage::budget`],
    /// [`usage::reserve`]).
    #[error("{0}")]
    OverBudget(Box<usage::budget::Refusal>),
    /// The `request_id` names a task that asked something else.
    #[error(
        "request_id {request_id:?} already started task {task} with another {what}: use a new request_id for a different task, or repeat the first start exactly to get task {task}"
    )]
    RequestConflict {
        /// The caller's key.
        request_id: String,
        /// The task it started.
        task: TaskId,
        /// `prompt`, `cwd` or `agent`.
        what: &'static str,
    },
    /// The task registry could not hand out an id (the message says what to fix).
    #[error("{0}")]
    Registry(String),
}
