//! The task table and the life of one task: spawn, watch, classify, retry, stop.
//!
//! Each task runs in its own tokio task (works on a current-thread runtime). One attempt is one
//! `opencode run` process in its own process group; its stdout (an unlinked temporary file
//! the reader follows, or a pipe where no such file can be made) and its stderr (a pipe) are
//! read by two reader tasks that fold events into the task record as they arrive, so `status`
//! shows live progress. Stopping (cancel, timeout, overflow loop, shutdown) goes through
//! [`procs::terminate_tree`]: SIGTERM to the group and every known descendant, a grace
//! period, SIGKILL, then reaping.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OnceCell, watch};

use crate::StartError;
use crate::capture::{Cut, HeadTail, LineSplitter, Piece, REPLY_CHARS, cut_text};
use crate::changes::{self, ChangedFiles, GitSnapshot};
use crate::classify::{ExitInfo, Failure, FailureKind};
use crate::claude::{self, Runner};
use crate::command::{self, Capabilities, LaunchContext};
use crate::events::{RunSummary, TokenUsage, ToolCall};
use crate::proctable::{self, OpencodeProcess};
use crate::quota;
use crate::registry::{self, Registry, StoredOutput, StoredTask};
use crate::runner::{OwnRun, Prepared, Stream, backend};
use crate::spec::{SupervisorConfig, TaskSpec};
use bridge_proc::{self as procs, ProcId};

/// Finished tasks kept in the table; older finished ones are forgotten first.
pub const MAX_FINISHED_TASKS: usize = 200;

/// Finished tasks whose record and output are safely in the registry stay in memory only this
/// many (the newest); older ones are answered from the registry like after a restart, so a
/// long-lived bridge does not hold every finished task's text (up to the output cap each).
pub const FINISHED_IN_MEMORY: usize = 16;

/// stderr bytes kept once a task has finished (its tail).
const FINISHED_STDERR: usize = 64 * 1024;

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
    /// Token totals of the current/last attempt.
    pub tokens: TokenUsage,
    /// Cost of the current/last attempt.
    pub cost: f64,
    /// Tool calls seen in the current/last attempt.
    pub tool_calls: usize,
    /// Exit code of the last attempt.
    pub exit_code: Option<i32>,
    /// opencode version in use.
    pub opencode_version: Option<String>,
    /// The caller's label.
    pub label: Option<String>,
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
    /// The files the task changed (editing agents only, once finished; `None`: not tracked).
    pub changed_files: Option<ChangedFiles>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Cancel,
    Shutdown,
}

#[derive(Debug)]
struct Record {
    agent: String,
    title: String,
    cwd: PathBuf,
    model: Option<String>,
    read_only: bool,
    runner: Runner,
    /// The parser of the current attempt's output (the runner's).
    stream: Box<dyn Stream>,
    state: TaskState,
    attempts: u32,
    accepted: Instant,
    accepted_wall: SystemTime,
    finished: Option<Instant>,
    attempt_started: Option<Instant>,
    root: Option<ProcId>,
    last_event: Option<Instant>,
    summary: RunSummary,
    stderr: HeadTail,
    failure: Option<Failure>,
    retry_at: Option<Instant>,
    exit: Option<ExitInfo>,
    stop: watch::Sender<Option<StopReason>>,
    done: watch::Sender<bool>,
    label: Option<String>,
    continues: Option<String>,
    changes: Option<ChangedFiles>,
    /// What the registry last got: events folded, session id known.
    persisted_events: usize,
    persisted_session: bool,
    /// The registry holds the current session id (or there is no registry): only then do
    /// snapshots show it, so a status that names the session means a restarted bridge knows
    /// it too (the writer sets it once `task.json` with the id is on disk).
    durable_session: bool,
    /// The finished record and its output are in the registry (it may leave memory).
    saved: bool,
}

#[derive(Debug, Default)]
struct Inner {
    tasks: BTreeMap<TaskId, Record>,
    next_id: TaskId,
    shutting_down: bool,
    /// Account key → until when starts are refused (quota or usage limit with a reset time).
    quota_until: BTreeMap<String, SystemTime>,
}

#[derive(Debug)]
struct Shared {
    config: SupervisorConfig,
    inner: Mutex<Inner>,
    caps: OnceCell<Result<Capabilities, String>>,
    worker_agent: serde_json::Value,
    registry: Option<Registry>,
    /// Writes this supervisor's records to `registry` on its own thread.
    writer: Option<registry::Writer>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<R>(&self, id: TaskId, f: impl FnOnce(&mut Record) -> R) -> Option<R> {
        self.lock().tasks.get_mut(&id).map(f)
    }
}

impl Drop for Shared {
    /// A supervisor dropped without [`Supervisor::shutdown`] still leaves every record it made
    /// on disk.
    fn drop(&mut self) {
        // The writer's callback may hold the last reference; it cannot wait for itself (and
        // writes what is queued before it exits anyway).
        let on_writer = std::thread::current().name() == Some(registry::WRITER_THREAD);
        if let Some(w) = &self.writer
            && !on_writer
        {
            w.flush();
        }
    }
}

/// Runs and tracks delegated opencode tasks. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct Supervisor {
    shared: Arc<Shared>,
}

fn state_of(r: &Record) -> TaskState {
    r.state
}

impl Supervisor {
    /// A supervisor with this configuration. With `config.subreaper` the process becomes a
    /// child subreaper (see [`SupervisorConfig::subreaper`]).
    pub fn new(config: SupervisorConfig) -> Supervisor {
        if config.subreaper {
            procs::become_subreaper();
        }
        let registry = config.state_dir.as_deref().and_then(|dir| {
            Registry::open(dir)
                .inspect_err(|e| tracing::warn!("{e}; tasks are kept in memory only"))
                .ok()
        });
        if let Some(reg) = &registry {
            // Decided once, at open: old finished tasks go, and tasks whose bridge and run are
            // both gone are recorded lost (the only write to a task of another bridge besides
            // cancelling an orphan).
            let (pruned, lost) = reg.sweep(config.prune_after, |t| {
                let lost = judge(t) == Owner::Lost;
                if lost {
                    settle_lost(t, registry::now_ms());
                }
                lost
            });
            if pruned > 0 || lost > 0 {
                tracing::info!(pruned, lost, "registry swept");
            }
        }
        let shared = Arc::new_cyclic(|me: &std::sync::Weak<Shared>| {
            let me = me.clone();
            // A session id is shown once the registry holds it (see `Record::durable_session`).
            let writer = registry.clone().map(|reg| {
                registry::Writer::new(reg, move |id, session| {
                    if let Some(shared) = me.upgrade() {
                        shared.with(id, |r| {
                            if r.summary.session_id().as_deref() == Some(session) {
                                r.durable_session = true;
                            }
                        });
                    }
                })
            });
            Shared {
                config,
                inner: Mutex::new(Inner {
                    next_id: 1,
                    ..Inner::default()
                }),
                caps: OnceCell::new(),
                worker_agent: bridge_policy::roster::worker_agent_config(),
                registry,
                writer,
            }
        });
        Supervisor { shared }
    }

    /// How many tasks are held in memory (running and finished); the rest of
    /// [`Supervisor::list`] is answered from the registry. For tests and diagnostics.
    pub fn tasks_in_memory(&self) -> usize {
        self.shared.lock().tasks.len()
    }

    /// The registry directory in use (`None`: tasks are kept in memory only).
    pub fn state_dir(&self) -> Option<&Path> {
        self.shared
            .registry
            .as_ref()
            .and(self.shared.config.state_dir.as_deref())
    }

    /// The configuration in use.
    pub fn config(&self) -> &SupervisorConfig {
        &self.shared.config
    }

    /// The installed opencode's capabilities, detected once (`--version`, `run --help`).
    pub async fn capabilities(&self) -> Result<Capabilities, String> {
        let bin = command::resolve_binary(self.shared.config.opencode_bin.as_deref())?;
        let env = self.shared.config.env.clone();
        self.shared
            .caps
            .get_or_init(|| async move { command::detect(&bin, &env).await })
            .await
            .clone()
    }

    /// Accepts a task and starts it in the background; returns at once. Must be called
    /// inside a tokio runtime.
    pub fn start(&self, spec: TaskSpec) -> Result<TaskId, StartError> {
        if spec.prompt.trim().is_empty() {
            return Err(StartError::InvalidSpec(
                "the prompt is empty: say what the agent should do".into(),
            ));
        }
        if spec.agent.trim().is_empty() {
            return Err(StartError::InvalidSpec(
                "no agent given: name the opencode agent to run".into(),
            ));
        }
        let cfg = &self.shared.config;
        let cwd = command::check_cwd(&spec.cwd, &cfg.root)?;
        let model = spec.model.clone().or_else(|| cfg.default_model.clone());
        let runner = Runner::for_model(model.as_deref());
        let account = backend(runner).account_key(model.as_deref());
        let bin = backend(runner)
            .binary(cfg)
            .map_err(StartError::BinaryMissing)?;
        let (stop_tx, stop_rx) = watch::channel(None);
        let (done_tx, _) = watch::channel(false);
        let id = {
            let mut inner = self.shared.lock();
            if inner.shutting_down {
                return Err(StartError::ShuttingDown);
            }
            if let Some(&until) = inner.quota_until.get(&account)
                && until > SystemTime::now()
            {
                return Err(StartError::QuotaWindow {
                    account,
                    until: claude::fmt_utc(until),
                });
            }
            if let Some(&until) = inner.quota_until.get(&account)
                && until > SystemTime::now()
            {
                return Err(StartError::QuotaWindow {
                    account,
                    until: claude::fmt_utc(until),
                });
            }
            let running = inner
                .tasks
                .values()
                .filter(|r| !r.state.is_finished())
                .count();
            if running >= cfg.max_parallel {
                return Err(StartError::Busy {
                    running,
                    limit: cfg.max_parallel,
                });
            }
            forget_finished(&mut inner, MAX_FINISHED_TASKS - 1);
            let id = match &self.shared.registry {
                Some(reg) => reg
                    .next_id()
                    .map_err(|e| StartError::Registry(e.to_string()))?,
                None => {
                    let id = inner.next_id;
                    inner.next_id += 1;
                    id
                }
            };
            inner.tasks.insert(
                id,
                Record {
                    agent: spec.agent.clone(),
                    title: spec.title.clone(),
                    cwd: cwd.clone(),
                    model: spec.model.clone().or_else(|| cfg.default_model.clone()),
                    read_only: spec.read_only,
                    runner,
                    stream: backend(runner).stream(),
                    state: TaskState::Starting,
                    attempts: 0,
                    accepted: Instant::now(),
                    accepted_wall: SystemTime::now(),
                    finished: None,
                    attempt_started: None,
                    root: None,
                    last_event: None,
                    summary: RunSummary::new(cfg.output_cap),
                    stderr: HeadTail::new(cfg.output_cap),
                    failure: None,
                    retry_at: None,
                    exit: None,
                    stop: stop_tx,
                    done: done_tx,
                    label: spec.label.clone().filter(|l| !l.trim().is_empty()),
                    continues: spec.session.clone().filter(|s| !s.trim().is_empty()),
                    changes: None,
                    persisted_events: 0,
                    persisted_session: false,
                    durable_session: self.shared.writer.is_none(),
                    saved: false,
                },
            );
            if let Some(r) = inner.tasks.get(&id) {
                persist(&self.shared, id, r, Save::Record);
            }
            id
        };
        let shared = Arc::clone(&self.shared);
        tokio::spawn(run_task(shared, id, spec, cwd, bin, stop_rx));
        Ok(id)
    }

    /// The state of a task.
    /// Tasks of this supervisor come from memory; with a registry, every other task of the
    /// state directory (earlier bridges, other bridges) from disk.
    pub fn status(&self, id: TaskId) -> Option<TaskSnapshot> {
        let version = self.version();
        let mine = {
            let inner = self.shared.lock();
            inner
                .tasks
                .get(&id)
                .map(|r| snapshot(id, r, &self.shared.config, version.clone()))
        };
        mine.or_else(|| self.stored(id).map(|t| stored_snapshot(&t, &judge(&t))))
    }

    /// Every task, oldest first: this supervisor's and, with a registry, every other task
    /// recorded in the state directory.
    pub fn list(&self) -> Vec<TaskSnapshot> {
        let version = self.version();
        let mut all: BTreeMap<TaskId, TaskSnapshot> = {
            let inner = self.shared.lock();
            inner
                .tasks
                .iter()
                .map(|(&id, r)| (id, snapshot(id, r, &self.shared.config, version.clone())))
                .collect()
        };
        if let Some(reg) = &self.shared.registry {
            for id in reg.ids() {
                if all.contains_key(&id) {
                    continue;
                }
                if let Some(t) = self.stored(id) {
                    all.insert(id, stored_snapshot(&t, &judge(&t)));
                }
            }
        }
        all.into_values().collect()
    }

    /// A task of the registry that is not in memory. A dead owner's unfinished task whose run
    /// is gone too is shown lost (ended at its last record); reading never writes: the
    /// registry records it lost when a supervisor next opens it.
    fn stored(&self, id: TaskId) -> Option<StoredTask> {
        let reg = self.shared.registry.as_ref()?;
        if self.shared.lock().tasks.contains_key(&id) {
            return None;
        }
        let mut t = reg.read_task(id)?;
        if judge(&t) == Owner::Lost {
            let last = t.updated_ms;
            settle_lost(&mut t, last);
        }
        Some(t)
    }

    fn version(&self) -> Option<String> {
        self.shared
            .caps
            .get()
            .and_then(|c| c.as_ref().ok())
            .map(|c| c.version.clone())
    }

    /// The output of a task: all its text cut to `head` / `tail` characters (default: the
    /// last 60 000), its final message, tool calls and stderr tail.
    pub fn result(
        &self,
        id: TaskId,
        head: Option<usize>,
        tail: Option<usize>,
    ) -> Option<TaskOutput> {
        let version = self.version();
        let inner = self.shared.lock();
        let Some(r) = inner.tasks.get(&id) else {
            drop(inner);
            return self.stored_result(id, head, tail);
        };
        let snap = snapshot(id, r, &self.shared.config, version);
        let text = cut_text(&r.summary.text().to_string_lossy(), head, tail);
        let final_text = cut_text(r.summary.final_text(), Some(REPLY_CHARS), None).text;
        let stderr_clean = crate::classify::strip_ansi(&r.stderr.tail_string(16_000));
        let stderr_tail = cut_text(stderr_clean.trim(), None, Some(4_000)).text;
        Some(TaskOutput {
            snapshot: snap,
            text,
            final_text,
            tool_calls: r.summary.tool_calls().clone(),
            stderr_tail,
            malformed_lines: r.summary.malformed(),
            unknown_events: r.summary.unknown(),
            stdout_bytes_dropped: r.summary.text().dropped_bytes(),
            changed_files: r.changes.clone(),
        })
    }

    fn stored_result(
        &self,
        id: TaskId,
        head: Option<usize>,
        tail: Option<usize>,
    ) -> Option<TaskOutput> {
        let t = self.stored(id)?;
        let snap = stored_snapshot(&t, &judge(&t));
        let o = self
            .shared
            .registry
            .as_ref()
            .and_then(|reg| reg.read_output(id))
            .unwrap_or_default();
        Some(TaskOutput {
            snapshot: snap,
            text: cut_text(&o.text, head, tail),
            final_text: cut_text(&o.final_text, Some(REPLY_CHARS), None).text,
            tool_calls: o.tool_calls.iter().map(ToolCall::from).collect(),
            stderr_tail: o.stderr_tail,
            malformed_lines: o.malformed_lines,
            unknown_events: o.unknown_events,
            stdout_bytes_dropped: o.stdout_bytes_dropped,
            changed_files: o.changed_files,
        })
    }

    /// Cancels a running or retrying task and waits until its processes are gone (at most
    /// the kill grace plus a moment). A finished task is reported as such.
    pub async fn cancel(&self, id: TaskId) -> CancelOutcome {
        let done = {
            let inner = self.shared.lock();
            match inner.tasks.get(&id) {
                None => None,
                Some(r) if r.state.is_finished() => {
                    return CancelOutcome::AlreadyFinished(state_of(r));
                }
                Some(r) => {
                    r.stop.send_replace(Some(StopReason::Cancel));
                    Some(r.done.subscribe())
                }
            }
        };
        let Some(done) = done else {
            return self.cancel_stored(id).await;
        };
        wait_done(done).await;
        match self.status(id).map(|s| s.state) {
            Some(TaskState::Cancelled) => CancelOutcome::Cancelled,
            Some(s) => CancelOutcome::AlreadyFinished(s),
            None => CancelOutcome::NotFound,
        }
    }

    /// Cancels a task of the registry that this supervisor did not start: only an orphan (its
    /// bridge is dead, its run alive) is stopped, after its start time is checked; the record
    /// then says `cancelled`.
    async fn cancel_stored(&self, id: TaskId) -> CancelOutcome {
        let Some(mut t) = self.stored(id) else {
            return CancelOutcome::NotFound;
        };
        let run = match judge(&t) {
            Owner::Finished | Owner::Lost => return CancelOutcome::AlreadyFinished(t.state()),
            Owner::Alive(pid) => return CancelOutcome::OtherBridge { pid },
            Owner::Orphan(run) => run,
        };
        let mut known = BTreeSet::new();
        procs::terminate_tree(run, &mut known, self.shared.config.kill_grace).await;
        procs::sweep(&known, Duration::from_secs(2)).await;
        procs::reap_if_our_zombie(run);
        t.state = TaskState::Cancelled.as_str().into();
        t.failure = None;
        t.run = None;
        t.finished_ms = Some(registry::now_ms());
        t.updated_ms = registry::now_ms();
        if let Some(reg) = &self.shared.registry {
            reg.write_task(&t);
        }
        CancelOutcome::Cancelled
    }

    /// Waits until the tasks have finished — any one of them (`all` false) or every one — or
    /// until `timeout`, and says which finished and which still run. Unknown ids are reported,
    /// never waited for.
    pub async fn wait_for(&self, ids: &[TaskId], all: bool, timeout: Duration) -> WaitReport {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut report = WaitReport {
                finished: Vec::new(),
                running: Vec::new(),
                unknown: Vec::new(),
                satisfied: false,
            };
            for &id in ids {
                match self.status(id) {
                    Some(s) if s.state.is_finished() => report.finished.push(s),
                    Some(s) => report.running.push(s),
                    None => report.unknown.push(id),
                }
            }
            report.satisfied = if all {
                report.running.is_empty()
            } else {
                !report.finished.is_empty() || report.running.is_empty()
            };
            if report.satisfied || tokio::time::Instant::now() >= deadline {
                return report;
            }
            let watchers: Vec<watch::Receiver<bool>> = report
                .running
                .iter()
                .filter_map(|s| self.watch_done(s.id))
                .collect();
            let poll = if watchers.len() == report.running.len() {
                Duration::from_millis(500)
            } else {
                // Tasks of other bridges are polled on disk.
                Duration::from_millis(250)
            };
            let any_done = async {
                let mut set = tokio::task::JoinSet::new();
                for w in watchers {
                    set.spawn(wait_done(w));
                }
                if set.is_empty() {
                    std::future::pending::<()>().await;
                }
                set.join_next().await;
            };
            tokio::select! {
                _ = any_done => {}
                _ = tokio::time::sleep(poll.min(deadline.saturating_duration_since(tokio::time::Instant::now()))) => {}
            }
        }
    }

    /// Waits until a task has finished and returns its final state (`None`: unknown id).
    pub async fn wait(&self, id: TaskId) -> Option<TaskSnapshot> {
        let done = self.shared.lock().tasks.get(&id)?.done.subscribe();
        wait_done(done).await;
        self.status(id)
    }

    /// A receiver that turns `true` when the task finishes (`None`: unknown id).
    pub fn watch_done(&self, id: TaskId) -> Option<watch::Receiver<bool>> {
        Some(self.shared.lock().tasks.get(&id)?.done.subscribe())
    }

    /// Stops every unfinished task (process groups killed, everything reaped) and refuses
    /// new ones. Returns when all are finished.
    pub async fn shutdown(&self) {
        let waits: Vec<watch::Receiver<bool>> = {
            let mut inner = self.shared.lock();
            inner.shutting_down = true;
            inner
                .tasks
                .values()
                .filter(|r| !r.state.is_finished())
                .map(|r| {
                    r.stop.send_replace(Some(StopReason::Shutdown));
                    r.done.subscribe()
                })
                .collect()
        };
        for w in waits {
            wait_done(w).await;
        }
        // Every record is on disk before the process may exit.
        if let Some(writer) = self.shared.writer.clone() {
            let _ = tokio::task::spawn_blocking(move || writer.flush()).await;
        }
    }

    /// This supervisor's opencode tasks whose session id is not known yet, with the wall-clock
    /// start of their current (or last) attempt: a session created since then with the task's
    /// title in its cwd is the one to [`learn_session`](Self::learn_session). Finished tasks
    /// are listed for [`LEARN_AFTER_FINISH`] after their end (a cancelled run's session may
    /// reach the store before its first event reached us); follow-ups are not listed (their
    /// session is the one they continue).
    pub fn sessionless(&self) -> Vec<Sessionless> {
        let now = Instant::now();
        self.shared
            .lock()
            .tasks
            .iter()
            .filter(|(_, r)| {
                backend(r.runner).learns_session_from_store()
                    && r.summary.session_id().is_none()
                    && r.continues.is_none()
                    && r.finished
                        .is_none_or(|f| now.saturating_duration_since(f) < LEARN_AFTER_FINISH)
            })
            .filter_map(|(&id, r)| {
                Some(Sessionless {
                    id,
                    title: r.title.clone(),
                    cwd: r.cwd.clone(),
                    attempt_started: attempt_wall(r)?,
                })
            })
            .collect()
    }

    /// Records `session_id` as the session of task `id`, learnt from opencode's store before
    /// the run's event stream named it (opencode prints the session id only with its first
    /// event). Taken only while the task has no session id, is an opencode task and the session
    /// was created (`created`) no earlier than the task's current attempt started. The registry
    /// gets it at once. True when recorded.
    pub fn learn_session(&self, id: TaskId, session_id: &str, created: SystemTime) -> bool {
        let mut inner = self.shared.lock();
        let Some(r) = inner.tasks.get_mut(&id) else {
            return false;
        };
        let fits = backend(r.runner).learns_session_from_store()
            && r.summary.session_id().is_none()
            && r.continues.is_none()
            && attempt_wall(r).is_some_and(|start| created >= start);
        if !fits {
            return false;
        }
        r.summary.learn_session_id(session_id);
        r.persisted_session = true;
        persist(&self.shared, id, r, Save::Record);
        true
    }

    /// The runner of a task: opencode or Claude Code (`None`: unknown id).
    pub fn runner(&self, id: TaskId) -> Option<Runner> {
        self.shared.lock().tasks.get(&id).map(|r| r.runner)
    }

    /// Quota windows in force: account key (`claude` or an opencode provider) and the time
    /// until which starts that would use it are refused.
    pub fn quota_windows(&self) -> Vec<(String, SystemTime)> {
        let now = SystemTime::now();
        self.shared
            .lock()
            .quota_until
            .iter()
            .filter(|(_, t)| **t > now)
            .map(|(k, t)| (k.clone(), *t))
            .collect()
    }

    /// The opencode process table, with this supervisor's tasks marked (task id, session id),
    /// followed by the running `claude -p` processes of its Claude tasks (kind `claude -p`).
    pub fn processes(&self) -> Vec<OpencodeProcess> {
        let mut table = proctable::scan();
        // Own opencode runs whose binary is not named opencode (OPENCODE_BIN=/x/oc-1.18).
        let program = crate::command::resolve_binary(self.config().opencode_bin.as_deref()).ok();
        let inner = self.shared.lock();
        let mut own: Vec<OpencodeProcess> = Vec::new();
        for (&id, r) in &inner.tasks {
            if !r.state.is_finished()
                && let Some(root) = r.root
                && root.is_alive()
            {
                let run = OwnRun {
                    task: id,
                    pid: root.pid,
                    agent: &r.agent,
                    title: &r.title,
                    model: r.model.as_deref(),
                    session: r.summary.session_id().as_deref(),
                };
                own.extend(backend(r.runner).own_process(run, program.as_deref(), &table));
            }
        }
        // opencode's own processes first, then the other runners' (`claude -p`).
        own.sort_by_key(|p| !matches!(p.kind, proctable::ProcessKind::Run));
        table.extend(own);
        for p in &mut table {
            for (&id, r) in &inner.tasks {
                if let Some(root) = r.root
                    && root.pid == p.pid
                    && !r.state.is_finished()
                {
                    p.task_id = Some(id);
                    if p.session_id.is_none() {
                        p.session_id = r.summary.session_id().clone();
                    }
                }
            }
        }
        drop(inner);
        // Runs of the registry's other tasks (orphans, other bridges') are marked too.
        if self.shared.registry.is_some() && table.iter().any(|p| p.task_id.is_none()) {
            for t in self.list() {
                if t.state.is_finished() || !(t.orphaned || t.other_bridge.is_some()) {
                    continue;
                }
                for p in table.iter_mut().filter(|p| p.task_id.is_none()) {
                    if Some(p.pid) == t.pid {
                        p.task_id = Some(t.id);
                        if p.session_id.is_none() {
                            p.session_id = t.session_id.clone();
                        }
                    }
                }
            }
        }
        table
    }
}

async fn wait_done(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

fn snapshot(
    id: TaskId,
    r: &Record,
    cfg: &SupervisorConfig,
    version: Option<String>,
) -> TaskSnapshot {
    let now = Instant::now();
    let running = r.state == TaskState::Running;
    let last_event_age = if running {
        r.last_event
            .or(r.attempt_started)
            .map(|t| now.saturating_duration_since(t))
    } else {
        None
    };
    TaskSnapshot {
        id,
        state: r.state,
        agent: r.agent.clone(),
        title: r.title.clone(),
        cwd: r.cwd.clone(),
        model: r.model.clone(),
        read_only: r.read_only,
        attempts: r.attempts,
        elapsed: r
            .finished
            .unwrap_or(now)
            .saturating_duration_since(r.accepted),
        started_at: r.accepted_wall,
        session_id: r.summary.session_id().clone().filter(|_| r.durable_session),
        pid: if running { r.root.map(|p| p.pid) } else { None },
        last_event_age,
        quiet: last_event_age.is_some_and(|a| a >= cfg.quiet_after),
        failure: r.failure.clone(),
        retry_in: if r.state == TaskState::Retrying {
            r.retry_at.map(|t| t.saturating_duration_since(now))
        } else {
            None
        },
        tokens: r.summary.tokens(),
        cost: r.summary.cost(),
        tool_calls: r.summary.tool_calls().len(),
        exit_code: r.exit.and_then(|e| e.code),
        // A Claude run uses no opencode.
        opencode_version: version.filter(|_| backend(r.runner).reports_opencode_version()),
        label: r.label.clone(),
        continues: r.continues.clone(),
        orphaned: false,
        other_bridge: None,
        lost: false,
    }
}

/// How long after its end a task without a session id is still matched against the store.
pub const LEARN_AFTER_FINISH: Duration = Duration::from_secs(60);

/// A task whose session id is not known yet (see [`Supervisor::sessionless`]).
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

/// The wall-clock start of a record's current attempt, truncated to the millisecond (opencode
/// stores times in ms), or `None` before the first attempt.
fn attempt_wall(r: &Record) -> Option<SystemTime> {
    let at = r.attempt_started?;
    let wall = r.accepted_wall + at.saturating_duration_since(r.accepted);
    Some(registry::from_ms(registry::to_ms(wall)))
}

/// Who answers for a task of the registry.
fn judge(t: &StoredTask) -> Owner {
    if t.state().is_finished() {
        return Owner::Finished;
    }
    let owner = ProcId::from(t.owner);
    if owner.is_alive() {
        return Owner::Alive(owner.pid);
    }
    match t.run.map(ProcId::from).filter(ProcId::is_alive) {
        Some(run) => Owner::Orphan(run),
        None => Owner::Lost,
    }
}

/// Records a task as lost, ended at `at_ms`.
fn settle_lost(t: &mut StoredTask, at_ms: u64) {
    t.state = TaskState::Failed.as_str().into();
    t.failure = Some(registry::StoredFailure::from(&Failure::with_advice(
        FailureKind::Exit,
        format!(
            "lost: the bridge that ran it (pid {}) stopped before the run ended, and the run is gone too; its outcome is unknown",
            t.owner.pid
        ),
        "Read what the session did with opencode_session_output (its id is in the status, when one was known), or start the task again.",
    )));
    t.lost = true;
    t.finished_ms = Some(at_ms);
    t.run = None;
    t.version = registry::FORMAT_VERSION;
    t.updated_ms = registry::now_ms();
}

/// Who is in charge of a task found in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// It has finished.
    Finished,
    /// The bridge that started it still runs (pid).
    Alive(i32),
    /// Its bridge is gone, its run still runs.
    Orphan(ProcId),
    /// Its bridge is gone and so is its run: the outcome is unknown.
    Lost,
}

fn stored_snapshot(t: &StoredTask, owner: &Owner) -> TaskSnapshot {
    let now = registry::now_ms();
    let end = t.finished_ms.unwrap_or(now).max(t.accepted_ms);
    let (pid, orphaned, other_bridge) = match owner {
        Owner::Orphan(run) => (Some(run.pid), true, None),
        Owner::Alive(bridge) => (t.run.map(|r| r.pid), false, Some(*bridge)),
        Owner::Finished | Owner::Lost => (None, false, None),
    };
    TaskSnapshot {
        id: t.id,
        state: t.state(),
        agent: t.agent.clone(),
        title: t.title.clone(),
        cwd: t.cwd.clone(),
        model: t.model.clone(),
        read_only: t.read_only,
        attempts: t.attempts,
        elapsed: Duration::from_millis(end - t.accepted_ms),
        started_at: registry::from_ms(t.accepted_ms),
        session_id: t.session_id.clone(),
        pid,
        last_event_age: None,
        quiet: false,
        failure: t.failure.as_ref().map(registry::StoredFailure::to_failure),
        retry_in: None,
        tokens: t.tokens.into(),
        cost: t.cost,
        tool_calls: t.tool_calls,
        exit_code: t.exit_code,
        opencode_version: t.opencode_version.clone(),
        label: t.label.clone(),
        continues: t.continues.clone(),
        orphaned,
        other_bridge,
        lost: t.lost,
    }
}

/// How much of a task [`persist`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Save {
    /// `task.json` only.
    Record,
    /// `task.json` and `output.json`.
    WithOutput,
}

/// Hands a task of this supervisor to the registry's writer (its output too with
/// [`Save::WithOutput`]). Called with the table locked, so the records of one task are queued
/// in the order they were made; the writing happens on the writer's thread.
fn persist(shared: &Shared, id: TaskId, r: &Record, save: Save) {
    if let (Some(writer), Some((t, o))) = (&shared.writer, records(shared, id, r, save, r.state)) {
        writer.write(t, o);
    }
}

/// The registry records of a task as it is now, with `state` (`None`: no registry).
fn records(
    shared: &Shared,
    id: TaskId,
    r: &Record,
    save: Save,
    state: TaskState,
) -> Option<(StoredTask, Option<StoredOutput>)> {
    let reg = shared.registry.as_ref()?;
    let version = shared
        .caps
        .get()
        .and_then(|c| c.as_ref().ok())
        .map(|c| c.version.clone());
    let finished_ms = r.finished.map(|f| {
        registry::to_ms(r.accepted_wall)
            + f.saturating_duration_since(r.accepted).as_millis() as u64
    });
    let t = StoredTask {
        version: registry::FORMAT_VERSION,
        id,
        owner: reg.me.into(),
        label: r.label.clone(),
        agent: r.agent.clone(),
        title: r.title.clone(),
        cwd: r.cwd.clone(),
        model: r.model.clone(),
        read_only: r.read_only,
        continues: r.continues.clone(),
        state: state.as_str().into(),
        attempts: r.attempts,
        accepted_ms: registry::to_ms(r.accepted_wall),
        finished_ms,
        session_id: r.summary.session_id().clone(),
        run: r.root.filter(|_| !state.is_finished()).map(Into::into),
        failure: r.failure.as_ref().map(Into::into),
        lost: false,
        exit_code: r.exit.and_then(|e| e.code),
        tokens: r.summary.tokens().into(),
        cost: r.summary.cost(),
        tool_calls: r.summary.tool_calls().len(),
        opencode_version: version,
        updated_ms: registry::now_ms(),
    };
    let mut output = None;
    if save == Save::WithOutput {
        let stderr_clean = crate::classify::strip_ansi(&r.stderr.tail_string(16_000));
        output = Some(StoredOutput {
            version: registry::FORMAT_VERSION,
            text: r.summary.text().to_string_lossy(),
            final_text: r.summary.final_text().to_owned(),
            tool_calls: r.summary.tool_calls().iter().map(Into::into).collect(),
            stderr_tail: cut_text(stderr_clean.trim(), None, Some(4_000)).text,
            malformed_lines: r.summary.malformed(),
            unknown_events: r.summary.unknown(),
            stdout_bytes_dropped: r.summary.text().dropped_bytes(),
            changed_files: r.changes.clone(),
        });
    }
    Some((t, output))
}

/// Forgets finished tasks, oldest first: beyond `keep` finished tasks in all, and beyond
/// [`FINISHED_IN_MEMORY`] of those already saved in the registry (which keeps answering for
/// them).
fn forget_finished(inner: &mut Inner, keep: usize) {
    let finished: Vec<(TaskId, bool)> = inner
        .tasks
        .iter()
        .filter(|(_, r)| r.state.is_finished())
        .map(|(&id, r)| (id, r.saved))
        .collect();
    let over = finished.len().saturating_sub(keep);
    let saved = finished.iter().filter(|(_, s)| *s).count();
    let mut saved_over = saved.saturating_sub(FINISHED_IN_MEMORY);
    for (i, (id, is_saved)) in finished.into_iter().enumerate() {
        if i < over {
            inner.tasks.remove(&id);
            saved_over = saved_over.saturating_sub(usize::from(is_saved));
        } else if is_saved && saved_over > 0 {
            inner.tasks.remove(&id);
            saved_over -= 1;
        }
    }
}

impl Record {
    /// The failure of a finished attempt, by the rules of the task's runner.
    fn classify_attempt(&self, stderr: &str, exit: ExitInfo) -> Option<Failure> {
        self.stream.classify(&self.summary, stderr, exit)
    }

    /// When the quota window that refused this task resets, if the refusal said so.
    fn quota_reset(&self) -> Option<SystemTime> {
        self.stream.quota_reset(&self.summary)
    }
}

/// Remembers the quota window of a task refused for quota, so later starts on the same account
/// are refused early.
fn note_quota_window(shared: &Shared, id: TaskId, failure: Option<&Failure>) {
    if failure.is_none_or(|f| f.kind != FailureKind::Quota) {
        return;
    }
    let mut inner = shared.lock();
    let Some(r) = inner.tasks.get(&id) else {
        return;
    };
    // A reset only seconds away is a retry hint (e.g. `retry-after-ms: 10`), not a window.
    let Some(until) = r
        .quota_reset()
        .filter(|t| *t > SystemTime::now() + quota::MIN_WINDOW)
    else {
        return;
    };
    let key = backend(r.runner).account_key(r.model.as_deref());
    inner.quota_until.insert(key, until);
}

/// Ends a task: its last record and output go to the registry first, and only once they are
/// on disk is it shown finished (and may leave memory), so no caller ever hears of an outcome
/// that a restarted bridge would not know.
async fn finish(shared: &Shared, id: TaskId, state: TaskState, failure: Option<Failure>) {
    note_quota_window(shared, id, failure.as_ref());
    let written = shared
        .with(id, |r| {
            r.failure = failure;
            // A finished task keeps its text; most of stderr is no longer needed.
            if r.stderr.kept_bytes() > FINISHED_STDERR {
                let tail = r.stderr.tail_string(FINISHED_STDERR);
                r.stderr = HeadTail::new(FINISHED_STDERR + 16);
                r.stderr.push(tail.as_bytes());
            }
            r.finished = Some(Instant::now());
            r.retry_at = None;
            let records = records(shared, id, r, Save::WithOutput, state);
            shared
                .writer
                .as_ref()
                .zip(records)
                .map(|(w, (t, o))| w.write_acked(t, o))
        })
        .flatten();
    let saved = match written {
        Some(ack) => ack.await.unwrap_or(false),
        None => false,
    };
    shared.with(id, |r| {
        r.state = state;
        r.saved = saved;
        r.done.send_replace(true);
    });
    forget_finished(&mut shared.lock(), MAX_FINISHED_TASKS);
}

/// Restarts after opencode failed to open its store before doing anything.
const STARTUP_RETRIES: u32 = 3;

/// True when stderr shows opencode failing to open or migrate its SQLite store (seen when
/// several runs start at once on a fresh data directory).
fn store_setup_error(stderr: &str) -> bool {
    const SIGNS: &[&str] = &[
        "database is locked",
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
        "CREATE TABLE",
        "already exists",
        "migration",
    ];
    SIGNS.iter().any(|s| stderr.contains(s))
}

enum AttemptEnd {
    Exited(ExitInfo),
    Stopped(StopReason),
    TimedOut,
    OverflowLoop(usize),
    SpawnFailed(String),
}

async fn run_task(
    shared: Arc<Shared>,
    id: TaskId,
    spec: TaskSpec,
    cwd: PathBuf,
    bin: PathBuf,
    stop_rx: watch::Receiver<Option<StopReason>>,
) {
    // Editing agents: look at the git tree before and after, to list what the task changed.
    let before = if spec.read_only {
        None
    } else {
        let dir = cwd.clone();
        tokio::task::spawn_blocking(move || GitSnapshot::take(&dir))
            .await
            .ok()
            .flatten()
    };
    let read_only = spec.read_only;
    let dir = cwd.clone();
    let (state, failure) = run_task_inner(&shared, id, spec, cwd, bin, stop_rx).await;
    if !read_only {
        let calls = shared
            .with(id, |r| r.summary.tool_calls().clone())
            .unwrap_or_default();
        let changes = tokio::task::spawn_blocking(move || match before {
            Some(snap) => snap.changes_since(),
            None => Some(changes::from_tool_calls(&calls, &dir)),
        })
        .await
        .ok()
        .flatten();
        shared.with(id, |r| r.changes = changes);
    }
    finish(&shared, id, state, failure).await;
}

async fn run_task_inner(
    shared: &Arc<Shared>,
    id: TaskId,
    spec: TaskSpec,
    cwd: PathBuf,
    bin: PathBuf,
    mut stop_rx: watch::Receiver<Option<StopReason>>,
) -> (TaskState, Option<Failure>) {
    let cfg = shared.config.clone();
    let timeout = spec.timeout.unwrap_or(cfg.default_timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let caps = if !backend(runner).probes_capabilities() {
        Ok(Capabilities::default())
    } else {
        let env = cfg.env.clone();
        let b = bin.clone();
        shared
            .caps
            .get_or_init(|| async move { command::detect(&b, &env).await })
            .await
            .clone()
    };
    let caps = match caps {
        Ok(c) => c,
        Err(e) => {
            return (TaskState::Failed, Some(Failure::new(FailureKind::Spawn, e)));
        }
    };
    let mut attempt: u32 = 0;
    let mut startup_retries = 0u32;
    loop {
        if let Some(reason) = *stop_rx.borrow() {
            return stopped(reason);
        }
        attempt += 1;
        let end = run_attempt(
            shared,
            id,
            &spec,
            &cwd,
            &bin,
            &caps,
            attempt,
            deadline,
            &mut stop_rx,
        )
        .await;
        match end {
            AttemptEnd::Stopped(reason) => {
                return stopped(reason);
            }
            AttemptEnd::TimedOut => {
                let f = Failure::new(
                    FailureKind::Timeout,
                    format!(
                        "stopped after {} (the task's time limit)",
                        fmt_duration(timeout)
                    ),
                );
                return (TaskState::TimedOut, Some(f));
            }
            AttemptEnd::SpawnFailed(msg) => {
                return (
                    TaskState::Failed,
                    Some(Failure::new(FailureKind::Spawn, msg)),
                );
            }
            AttemptEnd::OverflowLoop(n) => {
                let last = shared
                    .with(id, |r| r.summary.errors().last().map(|e| e.message.clone()))
                    .flatten()
                    .unwrap_or_default();
                let f = Failure::new(
                    FailureKind::ContextLength,
                    format!(
                        "stopped after {n} context overflows in a row: opencode kept compacting and retrying. Last: {last}"
                    ),
                );
                return (TaskState::Failed, Some(f));
            }
            AttemptEnd::Exited(exit) => {
                let (failure, produced, store_race) = shared
                    .with(id, |r| {
                        r.exit = Some(exit);
                        let stderr = r.stderr.to_string_lossy();
                        let race = r.summary.events() == 0
                            && exit.code != Some(0)
                            && store_setup_error(&stderr);
                        (
                            r.classify_attempt(&stderr, exit),
                            r.summary.produced_output(),
                            race,
                        )
                    })
                    .unwrap_or((None, false, false));
                let Some(f) = failure else {
                    return (TaskState::Succeeded, None);
                };
                // Several runs starting at once on a fresh store can trip over each other's
                // database setup before any session exists. Nothing ran, so starting again is
                // safe for every agent.
                if store_race && startup_retries < STARTUP_RETRIES {
                    startup_retries += 1;
                    let pause =
                        Duration::from_millis(400 * u64::from(startup_retries) + (97 * id) % 400);
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop_rx.changed() => {
                            let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                            return stopped(reason);
                        }
                    }
                    attempt -= 1;
                    continue;
                }
                let retryable =
                    f.kind.is_transient() && spec.read_only && !produced && attempt <= cfg.retries;
                if !retryable {
                    return (TaskState::Failed, Some(f));
                }
                let delay = cfg
                    .retry_delay
                    .saturating_mul(3u32.saturating_pow(attempt - 1));
                let at = tokio::time::Instant::now() + delay;
                if at >= deadline {
                    return (TaskState::Failed, Some(f));
                }
                shared.with(id, |r| {
                    r.state = TaskState::Retrying;
                    r.retry_at = Some(Instant::now() + delay);
                    r.failure = Some(f);
                    persist(shared, id, r, Save::WithOutput);
                });
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = stop_rx.changed() => {
                        let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                        return stopped(reason);
                    }
                }
            }
        }
    }
}

fn stopped(reason: StopReason) -> (TaskState, Option<Failure>) {
    let f = match reason {
        StopReason::Cancel => None,
        StopReason::Shutdown => Some(Failure::with_advice(
            FailureKind::Exit,
            "stopped because the bridge shut down",
            "Start the task again once the bridge is running.",
        )),
    };
    (TaskState::Cancelled, f)
}

fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{} min", s / 60)
    } else if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_attempt(
    shared: &Arc<Shared>,
    id: TaskId,
    spec: &TaskSpec,
    cwd: &Path,
    bin: &Path,
    caps: &Capabilities,
    attempt: u32,
    deadline: tokio::time::Instant,
    stop_rx: &mut watch::Receiver<Option<StopReason>>,
) -> AttemptEnd {
    let cfg = &shared.config;
    let prompt_path = cfg.prompt_dir.join(format!(
        "bridge-prompt-{}-{}-{}.md",
        std::process::id(),
        id,
        attempt
    ));
    let ctx = LaunchContext {
        program: bin,
        caps,
        default_model: cfg.default_model.as_deref(),
        base_env: &cfg.env,
        worker_agent: &shared.worker_agent,
        prompt_file_threshold: cfg.prompt_file_threshold,
        prompt_file_path: prompt_path,
    };
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let launch = backend(runner).launch(spec, cwd, &ctx);
    let launch = match launch {
        Ok(l) => l,
        Err(e) => return AttemptEnd::SpawnFailed(e),
    };
    let _prompt_file = match &launch.prompt_file {
        Some((path, content)) => {
            if let Some(dir) = path.parent()
                && let Err(e) = std::fs::create_dir_all(dir)
            {
                return AttemptEnd::SpawnFailed(format!(
                    "cannot create {} for the oversized prompt: {e}",
                    dir.display()
                ));
            }
            if let Err(e) = write_private(path, content) {
                return AttemptEnd::SpawnFailed(format!(
                    "cannot write the oversized prompt to {}: {e}",
                    path.display()
                ));
            }
            Some(RemoveOnDrop(path.clone()))
        }
        None => None,
    };

    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .current_dir(cwd)
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(false);
    let out_file = output_file();
    match out_file.as_ref().and_then(|f| f.try_clone().ok()) {
        Some(f) => cmd.stdout(f),
        None => cmd.stdout(std::process::Stdio::piped()),
    };
    for k in &launch.env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in &launch.env_set {
        cmd.env(k, v);
    }
    shared.with(id, |r| {
        r.state = TaskState::Running;
        r.attempts = attempt;
        r.attempt_started = Some(Instant::now());
        r.last_event = None;
        r.summary = RunSummary::new(cfg.output_cap);
        r.durable_session = shared.writer.is_none();
        r.stream = backend(r.runner).stream();
        r.stderr = HeadTail::new(cfg.output_cap);
        r.exit = None;
        r.retry_at = None;
        r.failure = None;
    });
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return AttemptEnd::SpawnFailed(format!(
                "cannot start {}: {e}",
                launch.program.display()
            ));
        }
    };
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    // The child is not reaped until we wait on it, so its /proc entry is there.
    let root = ProcId::of(pid).unwrap_or(ProcId { pid, start_time: 0 });
    shared.with(id, |r| {
        r.root = Some(root);
        persist(shared, id, r, Save::Record);
    });

    if let Some(mut stdin) = child.stdin.take() {
        let bytes = launch.stdin.clone();
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        });
    }
    let (out_done, out_done_rx) = tokio::sync::watch::channel(false);
    // Set when the readers took too long to drain: the output follower stops (a task on the
    // blocking pool cannot be aborted).
    let abandon = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let out_reader = match (out_file, child.stdout.take()) {
        (_, Some(pipe)) => {
            enlarge_pipe(&pipe);
            Some(tokio::spawn(read_stream(
                Arc::clone(shared),
                id,
                pipe,
                true,
            )))
        }
        (Some(file), None) => {
            let (shared, abandon) = (Arc::clone(shared), Arc::clone(&abandon));
            follower(move || follow_output(&shared, id, &file, out_done_rx, &abandon))
        }
        (None, None) => None,
    };
    let err_reader = child
        .stderr
        .take()
        .map(|s| tokio::spawn(read_stream(Arc::clone(shared), id, s, false)));

    let mut known: BTreeSet<ProcId> = BTreeSet::new();
    let mut ticks: u64 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop_reason: Option<AttemptEnd>;
    let mut exit: Option<ExitInfo> = None;
    loop {
        tokio::select! {
            res = child.wait() => {
                exit = Some(match res {
                    Ok(st) => {
                        use std::os::unix::process::ExitStatusExt;
                        ExitInfo { code: st.code(), signal: st.signal() }
                    }
                    Err(_) => ExitInfo::default(),
                });
                stop_reason = None;
                break;
            }
            _ = stop_rx.changed() => {
                let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                stop_reason = Some(AttemptEnd::Stopped(reason));
                break;
            }
            _ = tokio::time::sleep_until(deadline) => {
                stop_reason = Some(AttemptEnd::TimedOut);
                break;
            }
            _ = tick.tick() => {
                ticks += 1;
                // Keep the registry current: the session id as soon as it is known, the output
                // every few seconds while events arrive.
                shared.with(id, |r| {
                    let session = r.summary.session_id().is_some() && !r.persisted_session;
                    let output = ticks.is_multiple_of(25) && r.summary.events() != r.persisted_events;
                    if session || output {
                        r.persisted_session = r.summary.session_id().is_some();
                        r.persisted_events = r.summary.events();
                        persist(shared, id, r, if output { Save::WithOutput } else { Save::Record });
                    }
                });
                // A walk of /proc: on the blocking pool, not on the thread that answers calls.
                let mut k = known.clone();
                if let Ok(k) = tokio::task::spawn_blocking(move || {
                    procs::refresh_known_recent(root, &mut k, Duration::from_millis(150));
                    k
                })
                .await
                {
                    known = k;
                }
                let overflows = shared.with(id, |r| r.summary.overflows()).unwrap_or(0);
                if overflows >= cfg.overflow_limit.max(1) {
                    stop_reason = Some(AttemptEnd::OverflowLoop(overflows));
                    break;
                }
            }
        }
    }

    if exit.is_none() {
        // Stop the whole tree, then reap the root.
        procs::terminate_tree(root, &mut known, cfg.kill_grace).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    }
    // Let the readers drain what is left; a descendant holding the pipes open must not keep
    // us waiting.
    let _ = out_done.send(true);
    for reader in [out_reader, err_reader].into_iter().flatten() {
        let abort = reader.abort_handle();
        if tokio::time::timeout(Duration::from_millis(1500), reader)
            .await
            .is_err()
        {
            abandon.store(true, std::sync::atomic::Ordering::Relaxed);
            abort.abort();
        }
    }
    // Whatever the run left behind (background commands, escapees) goes too.
    procs::refresh_known(root, &mut known);
    if known.iter().any(ProcId::is_alive) {
        procs::terminate_tree(root, &mut known, cfg.kill_grace).await;
    }
    procs::sweep(&known, Duration::from_secs(2)).await;
    shared.with(id, |r| r.root = None);
    match stop_reason {
        Some(end) => end,
        None => AttemptEnd::Exited(exit.unwrap_or_default()),
    }
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content.as_bytes())
}

/// Longest line read from a run's stdout; longer lines are counted as malformed and skipped up
/// to the next newline (see [`LineSplitter`]).
const MAX_LINE: usize = 8 * 1024 * 1024;

/// Bytes asked of one read of a run's stdout. Lines that lie whole inside one read are parsed
/// where they are, without a copy.
const STDOUT_READ: usize = 256 * 1024;

/// Bytes asked of one read of a run's stderr (it carries little).
const STDERR_READ: usize = 16 * 1024;

/// Size asked for a run's stdout pipe (Linux `F_SETPIPE_SZ`; the default pipe holds 64 KiB),
/// so a run writing fast fills whole reads and both sides wake up less often. A refusal (the
/// user's pipe quota, `/proc/sys/fs/pipe-max-size`) leaves the default size.
const STDOUT_PIPE: i32 = 1 << 20;

fn enlarge_pipe(fd: impl std::os::fd::AsFd) {
    let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(STDOUT_PIPE));
}

async fn read_stream(
    shared: Arc<Shared>,
    id: TaskId,
    mut stream: impl AsyncRead + Unpin,
    is_stdout: bool,
) {
    let mut buf = vec![0u8; if is_stdout { STDOUT_READ } else { STDERR_READ }];
    let mut lines = LineSplitter::new(MAX_LINE);
    let Some(runner) = shared.with(id, |r| r.runner) else {
        return;
    };
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        if is_stdout {
            if !fold_stdout(&shared, id, runner, &mut lines, chunk) {
                break;
            }
            continue;
        }
        let mut inner = shared.lock();
        let Some(r) = inner.tasks.get_mut(&id) else {
            break;
        };
        r.stderr.push(chunk);
    }
    if is_stdout {
        finish_stdout(&shared, id, &mut lines);
    }
}

/// Reads one stdout line by the rules of `runner` (no lock held).
fn prepare(runner: Runner, piece: Piece<'_>) -> Prepared {
    match piece {
        Piece::TooLong => Prepared::TooLong,
        Piece::Line(line) => backend(runner).prepare(line),
    }
}

/// Folds what a run wrote to stdout: every whole line of `chunk` (the rest waits in `lines`).
/// The lines are parsed before the task table is locked, so a flood of events holds the lock
/// only for the folding. False when the task is gone.
fn fold_stdout(
    shared: &Shared,
    id: TaskId,
    runner: Runner,
    lines: &mut LineSplitter,
    chunk: &[u8],
) -> bool {
    let mut read = Vec::new();
    lines.feed(chunk, |piece| read.push(prepare(runner, piece)));
    let mut inner = shared.lock();
    let Some(r) = inner.tasks.get_mut(&id) else {
        return false;
    };
    for line in read {
        fold(shared, id, r, line);
    }
    true
}

/// Folds the last, unterminated line of a run's stdout, and notes when it was not a whole
/// event (the output was cut off).
fn finish_stdout(shared: &Shared, id: TaskId, lines: &mut LineSplitter) {
    shared.with(id, |r| {
        let unterminated = lines.pending_bytes() > 0;
        let malformed = r.summary.malformed();
        let runner = r.runner;
        lines.finish(|piece| fold(shared, id, r, prepare(runner, piece)));
        if unterminated && r.summary.malformed() > malformed {
            r.summary.note_ended_mid_line();
        }
    });
}

/// Folds one stdout line (or an over-long one) into the task record.
fn fold(shared: &Shared, id: TaskId, r: &mut Record, line: Prepared) {
    let event = r.stream.push(&mut r.summary, line);
    if event {
        r.last_event = Some(Instant::now());
    }
    // The session id goes to the registry the moment it is known: no status shows it
    // before a restarted bridge could.
    if !r.persisted_session && r.summary.session_id().is_some() {
        r.persisted_session = true;
        persist(shared, id, r, Save::Record);
    }
}

/// Runs `follow` on a thread of its own; the handle ends when the thread does.
///
/// Reading and parsing a flood of events is CPU work. It runs off the runtime's thread, so
/// that thread stays free to answer calls; a named thread of its own rather than one of the
/// blocking pool, which the reads that answer calls use. (A lower priority for it was tried
/// and made the worst call slower: a thread that holds the task table's lock while the
/// scheduler passes it over keeps every caller waiting.) `None` when no thread can be started:
/// then the run's output is not read (the run itself is unaffected) and a warning says so.
fn follower(follow: impl FnOnce() + Send + 'static) -> Option<tokio::task::JoinHandle<()>> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("run-output".into())
        .spawn(move || {
            follow();
            let _ = tx.send(());
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start a thread to read a run's output: {e}");
        return None;
    }
    Some(tokio::spawn(async move {
        let _ = rx.await;
    }))
}

/// How often a run's output file is looked at for new bytes while the run lives.
const FOLLOW_EVERY: Duration = Duration::from_millis(20);

/// Consumed output is given back to the file system (a hole is punched) every this many bytes,
/// so a run that floods its output does not fill the disk.
const PUNCH_EVERY: u64 = 8 << 20;

/// An unlinked temporary file for a run's stdout, opened for appending, or `None` (then a
/// pipe is used). opencode (a Bun program) drops what it has not written yet when it exits
/// with a full stdout pipe, losing the end of a long answer; writes to a file complete at once.
fn output_file() -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_TMPFILE.bits())
        .open(std::env::temp_dir())
        .inspect_err(|e| tracing::debug!("no output file ({e}); a pipe is used"))
        .ok()
}

/// Reads a run's stdout file as it grows (with `pread`, so the offset the run writes at is
/// never moved), folding each whole line, until `done` says the run ended; then reads what is
/// left and stops. Blocking: runs on a thread of its own (the runtime's blocking pool), and
/// stops at once, folding nothing more, when `abandon` is set.
fn follow_output(
    shared: &Shared,
    id: TaskId,
    file: &std::fs::File,
    mut done: tokio::sync::watch::Receiver<bool>,
    abandon: &std::sync::atomic::AtomicBool,
) {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; STDOUT_READ];
    let mut lines = LineSplitter::new(MAX_LINE);
    let (mut offset, mut punched) = (0u64, 0u64);
    let Some(runner) = shared.with(id, |r| r.runner) else {
        return;
    };
    loop {
        // A dropped sender means the attempt is over too.
        let ended = *done.borrow_and_update() || done.has_changed().is_err();
        loop {
            let n = match file.read_at(&mut buf, offset) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(task = id, "cannot read the run's output file: {e}");
                    finish_stdout(shared, id, &mut lines);
                    return;
                }
            };
            if abandon.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
            offset += n as u64;
            if !fold_stdout(shared, id, runner, &mut lines, &buf[..n]) {
                return;
            }
            if offset - punched >= PUNCH_EVERY {
                punched = offset & !0xfff;
                punch_hole(file, punched);
            }
        }
        if ended {
            break;
        }
        if !done.has_changed().unwrap_or(true) {
            std::thread::sleep(FOLLOW_EVERY);
        }
    }
    finish_stdout(shared, id, &mut lines);
}

/// Frees the first `len` bytes of `file` on disk, keeping its size (a failure, e.g. on a file
/// system without holes, only costs disk space).
fn punch_hole(file: &std::fs::File, len: u64) {
    use nix::fcntl::{FallocateFlags, fallocate};
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    let _ = fallocate(file, flags, 0, i64::try_from(len).unwrap_or(i64::MAX));
}
