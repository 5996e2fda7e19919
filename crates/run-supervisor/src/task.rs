//! What callers see of a task: its id and state, a snapshot, its output, and the answers of
//! `cancel` and `wait_for`. Plain data; the supervisor builds it (one code path for a task of
//! this bridge and for one read from the registry, see `supervisor::record`).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::classify::Failure;
use bridge_isolation::ToolCall;
use bridge_isolation::changes::ChangedFiles;
use bridge_ledger::usage::TokenUsage;
use bridge_proc::stream::Cut;

/// Identifies a task of this supervisor (1, 2, 3, ...).
pub type TaskId = u64;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Accepted; opencode is being prepared or started.
    Starting,
    /// opencode is running.
    Running,
    /// A transient failure happened; waiting to start the next attempt.
    Retrying,
    /// Finished with an answer.
    Succeeded,
    /// Finished with a classified failure.
    Failed,
    /// Stopped by cancel or bridge shutdown.
    Cancelled,
    /// Stopped at its time limit.
    TimedOut,
}

impl TaskState {
    /// True for the final states.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded | TaskState::Failed | TaskState::Cancelled | TaskState::TimedOut
        )
    }

    /// The state named by [`as_str`](Self::as_str).
    pub fn parse(name: &str) -> Option<TaskState> {
        [
            TaskState::Starting,
            TaskState::Running,
            TaskState::Retrying,
            TaskState::Succeeded,
            TaskState::Failed,
            TaskState::Cancelled,
            TaskState::TimedOut,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }

    /// snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Starting => "starting",
            TaskState::Running => "running",
            TaskState::Retrying => "retrying",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::TimedOut => "timed_out",
        }
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A point-in-time view of one task.
#[derive(Debug, Clone)]
pub struct TaskSnapshot {
    /// Task id.
    pub id: TaskId,
    /// State.
    pub state: TaskState,
    /// Agent name.
    pub agent: String,
    /// Session title.
    pub title: String,
    /// Canonical working directory.
    pub cwd: PathBuf,
    /// Model as given (task or default), if any.
    pub model: Option<String>,
    /// Whether the agent is read-only (retry rule).
    pub read_only: bool,
    /// Attempts started so far.
    pub attempts: u32,
    /// Time since the task was accepted (to its end when finished).
    pub elapsed: Duration,
    /// When the task was accepted.
    pub started_at: SystemTime,
    /// opencode session id, once an event carried it.
    pub session_id: Option<String>,
    /// pid of the running opencode process.
    pub pid: Option<i32>,
    /// Time since the last event of the running attempt (or since it started, before any).
    pub last_event_age: Option<Duration>,
    /// True when a running attempt has printed nothing for the configured quiet period
    /// (blocked on a permission, a silent hang, a very long tool call).
    pub quiet: bool,
    /// The failure (final, or the one that caused a pending retry).
    pub failure: Option<Failure>,
    /// Time left before the next attempt, while retrying.
    pub retry_in: Option<Duration>,
    /// opencode is waiting to retry a request the provider refused (a rate limit, a quota):
    /// the provider's message and when opencode tries again (a running served task only).
    pub provider_wait: Option<bridge_ledger::quota::ProviderWait>,
    /// An `opencode run` held by a provider's refusals, which it does not say when it retries
    /// (read from opencode's log; a running task of the run engine only).
    pub provider_stall: Option<bridge_ledger::quota::ProviderStall>,
    /// Token totals of the current/last attempt.
    pub tokens: TokenUsage,
    /// Cost of the current/last attempt.
    pub cost: f64,
    /// What the task used and cost, every attempt added up, estimated where opencode recorded
    /// 0, with its Claude-equivalent (`None`: a record written before usage was kept).
    pub usage: Option<bridge_ledger::usage::Usage>,
    /// Each attempt's usage, first to last.
    pub attempt_usage: Vec<bridge_ledger::usage::Usage>,
    /// Tool calls seen in the current/last attempt.
    pub tool_calls: usize,
    /// Exit code of the last attempt.
    pub exit_code: Option<i32>,
    /// opencode version in use.
    pub opencode_version: Option<String>,
    /// The caller's label.
    pub label: Option<String>,
    /// Whether the kernel fence confined the latest attempt: `confined (Landlock ABI N)` or
    /// `not confined: <why>` ([`bridge_fence::Confinement`]); `None` before the first attempt.
    pub sandbox: Option<String>,
    /// Where it ran: `run` (a process per attempt), `serve` (the bridge's warm local server) or
    /// `serve:<name>` (a server of the config file).
    pub engine: String,
    /// The session this task sent a follow-up to (`None`: it started a new session).
    pub continues: Option<String>,
    /// The bridge that ran the task is gone but its opencode process still runs (`pid`); it can
    /// be cancelled.
    pub orphaned: bool,
    /// pid of another live bridge (sharing the state directory) that runs this task.
    pub other_bridge: Option<i32>,
    /// The bridge that ran it and its run both went away before it ended: it is `failed`
    /// (kind `exit`) and its outcome is unknown; the session may say more.
    pub lost: bool,
    /// How the caller's verify command last ended (`None`: no verify, or it has not run).
    pub verify: Option<crate::verify::VerifyOutcome>,
    /// Whether the answer satisfied the caller's output schema (`None`: no schema, or not
    /// checked yet).
    pub schema_valid: Option<bool>,
}

/// The output of a task.
#[derive(Debug, Clone)]
pub struct TaskOutput {
    /// Its state.
    pub snapshot: TaskSnapshot,
    /// Everything the agent wrote (text parts), cut as asked (see [`cut_text`]).
    pub text: Cut,
    /// The text of the agent's last message (at most 100 000 characters).
    pub final_text: String,
    /// Tool calls in order.
    pub tool_calls: Vec<ToolCall>,
    /// The end of opencode's stderr (ANSI colours removed, at most 4 000 characters).
    pub stderr_tail: String,
    /// stdout lines that were not JSON events.
    pub malformed_lines: usize,
    /// Events of unknown types.
    pub unknown_events: usize,
    /// Bytes of the agent's text cut from the middle by the output cap (2 MB by default;
    /// the head and the tail are kept). Events are folded as they arrive and raw output
    /// lines are not kept.
    pub stdout_bytes_dropped: u64,
    /// The files the task changed (editing agents, once finished; a read-only agent's only when
    /// it changed some, a policy violation; `None`: not tracked).
    pub changed_files: Option<ChangedFiles>,
    /// The post-run audit (opencode runs, once finished): `audited: agent …, model … in N
    /// assistant messages`, or `not audited: …` and why; further findings after `; also:`.
    /// `None`: not audited (a Claude run, or the task has not ended).
    pub audit: Option<String>,
    /// The end of the last verify run's output (redacted).
    pub verify_output: Option<String>,
    /// The answer, parsed and valid against the caller's output schema.
    pub output: Option<serde_json::Value>,
}

/// What `cancel` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The task was running or retrying; its processes are gone now.
    Cancelled,
    /// The task had already finished in this state; nothing was signalled.
    AlreadyFinished(TaskState),
    /// No task has this id.
    NotFound,
    /// Another bridge that is still running owns the task: cancel it there.
    OtherBridge {
        /// That bridge's pid.
        pid: i32,
    },
}

/// What [`Supervisor::wait_for`] saw.
#[derive(Debug, Clone)]
pub struct WaitReport {
    /// Tasks that have finished, in the order asked.
    pub finished: Vec<TaskSnapshot>,
    /// Tasks still running, in the order asked.
    pub running: Vec<TaskSnapshot>,
    /// Ids no task has.
    pub unknown: Vec<TaskId>,
    /// True when the wait ended because its condition held (false: it timed out).
    pub satisfied: bool,
}

/// A task whose session id is not known yet (see [`Supervisor::sessionless`](crate::supervisor::Supervisor::sessionless)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sessionless {
    /// Task id.
    pub id: TaskId,
    /// The session title the run was given (`--title`).
    pub title: String,
    /// The run's working directory (canonical).
    pub cwd: PathBuf,
    /// When its current (or last) attempt started, to the millisecond below.
    pub attempt_started: SystemTime,
}
