//! Why a task was not started: the one error of [`Supervisor::start`](crate::supervisor::Supervisor::start), each
//! message saying what to do.

use std::path::PathBuf;

use crate::task::TaskId;
use bridge_ledger::usage;

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
