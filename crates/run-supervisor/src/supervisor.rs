//! The task table and the life of one task: spawn, watch, classify, retry, stop.
//!
//! Each task runs in its own tokio task (works on a current-thread runtime). One attempt is one
//! `opencode run` process in its own process group; its stdout and stderr are read by two
//! reader tasks that fold events into the task record as they arrive, so `status` shows live
//! progress. Stopping (cancel, timeout, overflow loop, shutdown) goes through
//! [`procs::terminate_tree`]: SIGTERM to the group and every known descendant, a grace
//! period, SIGKILL, then reaping.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{OnceCell, watch};

use crate::StartError;
use crate::capture::{Cut, HeadTail, REPLY_CHARS, cut_text};
use crate::classify::{ExitInfo, Failure, FailureKind, classify};
use crate::command::{self, Capabilities, LaunchContext};
use crate::events::{RunSummary, TokenUsage, ToolCall};
use crate::procs::{self, ProcId};
use crate::proctable::{self, OpencodeProcess};
use crate::spec::{SupervisorConfig, TaskSpec};
use crate::claude::{self, ClaudeStream, Runner};
use crate::quota;

/// Raw stdout kept per attempt (events are folded as they arrive; the raw lines are only
/// kept for the byte counts and debugging).
const RAW_STDOUT_CAP: usize = 256 * 1024;

/// Finished tasks kept in the table; older finished ones are forgotten first.
pub const MAX_FINISHED_TASKS: usize = 200;

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
    /// Bytes of raw stdout dropped by the 2 MB capture.
    pub stdout_bytes_dropped: u64,
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
    claude: ClaudeStream,
    state: TaskState,
    attempts: u32,
    accepted: Instant,
    accepted_wall: SystemTime,
    finished: Option<Instant>,
    attempt_started: Option<Instant>,
    root: Option<ProcId>,
    last_event: Option<Instant>,
    summary: RunSummary,
    stdout: HeadTail,
    stdout_dropped: u64,
    stderr: HeadTail,
    failure: Option<Failure>,
    retry_at: Option<Instant>,
    exit: Option<ExitInfo>,
    stop: watch::Sender<Option<StopReason>>,
    done: watch::Sender<bool>,
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
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<R>(&self, id: TaskId, f: impl FnOnce(&mut Record) -> R) -> Option<R> {
        self.lock().tasks.get_mut(&id).map(f)
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
        Supervisor {
            shared: Arc::new(Shared {
                config,
                inner: Mutex::new(Inner {
                    next_id: 1,
                    ..Inner::default()
                }),
                caps: OnceCell::new(),
                worker_agent: bridge_policy::worker_agent_config(),
            }),
        }
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
        let account = quota::account_key(runner, model.as_deref());
        let bin = match runner {
            Runner::Opencode => command::resolve_binary(cfg.opencode_bin.as_deref()),
            Runner::Claude => claude::resolve_claude(cfg.claude_bin.as_deref()),
        }
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
            let finished: Vec<TaskId> = inner
                .tasks
                .iter()
                .filter(|(_, r)| r.state.is_finished())
                .map(|(&id, _)| id)
                .collect();
            if finished.len() >= MAX_FINISHED_TASKS {
                for old in &finished[..=finished.len() - MAX_FINISHED_TASKS] {
                    inner.tasks.remove(old);
                }
            }
            let id = inner.next_id;
            inner.next_id += 1;
            inner.tasks.insert(
                id,
                Record {
                    agent: spec.agent.clone(),
                    title: spec.title.clone(),
                    cwd: cwd.clone(),
                    model: spec.model.clone().or_else(|| cfg.default_model.clone()),
                    read_only: spec.read_only,
                    runner,
                    claude: ClaudeStream::default(),
                    state: TaskState::Starting,
                    attempts: 0,
                    accepted: Instant::now(),
                    accepted_wall: SystemTime::now(),
                    finished: None,
                    attempt_started: None,
                    root: None,
                    last_event: None,
                    summary: RunSummary::new(cfg.output_cap),
                    stdout: HeadTail::new(RAW_STDOUT_CAP.min(cfg.output_cap)),
                    stdout_dropped: 0,
                    stderr: HeadTail::new(cfg.output_cap),
                    failure: None,
                    retry_at: None,
                    exit: None,
                    stop: stop_tx,
                    done: done_tx,
                },
            );
            id
        };
        let shared = Arc::clone(&self.shared);
        tokio::spawn(run_task(shared, id, spec, cwd, bin, stop_rx));
        Ok(id)
    }

    /// The state of a task.
    pub fn status(&self, id: TaskId) -> Option<TaskSnapshot> {
        let version = self.version();
        let inner = self.shared.lock();
        inner
            .tasks
            .get(&id)
            .map(|r| snapshot(id, r, &self.shared.config, version.clone()))
    }

    /// Every task, oldest first.
    pub fn list(&self) -> Vec<TaskSnapshot> {
        let version = self.version();
        let inner = self.shared.lock();
        inner
            .tasks
            .iter()
            .map(|(&id, r)| snapshot(id, r, &self.shared.config, version.clone()))
            .collect()
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
        let r = inner.tasks.get(&id)?;
        let snap = snapshot(id, r, &self.shared.config, version);
        let text = cut_text(&r.summary.text.to_string_lossy(), head, tail);
        let final_text = cut_text(&r.summary.final_text, Some(REPLY_CHARS), None).text;
        let stderr_clean = crate::classify::strip_ansi(&r.stderr.tail_string(16_000));
        let stderr_tail = cut_text(stderr_clean.trim(), None, Some(4_000)).text;
        Some(TaskOutput {
            snapshot: snap,
            text,
            final_text,
            tool_calls: r.summary.tool_calls.clone(),
            stderr_tail,
            malformed_lines: r.summary.malformed,
            unknown_events: r.summary.unknown,
            stdout_bytes_dropped: r.stdout.dropped_bytes().max(r.stdout_dropped),
        })
    }

    /// Cancels a running or retrying task and waits until its processes are gone (at most
    /// the kill grace plus a moment). A finished task is reported as such.
    pub async fn cancel(&self, id: TaskId) -> CancelOutcome {
        let done = {
            let inner = self.shared.lock();
            let Some(r) = inner.tasks.get(&id) else {
                return CancelOutcome::NotFound;
            };
            if r.state.is_finished() {
                return CancelOutcome::AlreadyFinished(state_of(r));
            }
            r.stop.send_replace(Some(StopReason::Cancel));
            r.done.subscribe()
        };
        wait_done(done).await;
        match self.status(id).map(|s| s.state) {
            Some(TaskState::Cancelled) => CancelOutcome::Cancelled,
            Some(s) => CancelOutcome::AlreadyFinished(s),
            None => CancelOutcome::NotFound,
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
        let inner = self.shared.lock();
        for (&id, r) in &inner.tasks {
            if r.runner == Runner::Claude
                && !r.state.is_finished()
                && let Some(root) = r.root
                && root.is_alive()
                && let Some(p) = claude::process_entry(
                    root.pid,
                    id,
                    &r.agent,
                    &r.title,
                    r.model.as_deref(),
                    r.claude_session(),
                )
            {
                table.push(p);
            }
        }
        for p in &mut table {
            for (&id, r) in &inner.tasks {
                if let Some(root) = r.root
                    && root.pid == p.pid
                    && !r.state.is_finished()
                {
                    p.task_id = Some(id);
                    if p.session_id.is_none() {
                        p.session_id = r.summary.session_id.clone();
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
        session_id: r.summary.session_id.clone(),
        pid: if running { r.root.map(|p| p.pid) } else { None },
        last_event_age,
        quiet: last_event_age.is_some_and(|a| a >= cfg.quiet_after),
        failure: r.failure.clone(),
        retry_in: if r.state == TaskState::Retrying {
            r.retry_at.map(|t| t.saturating_duration_since(now))
        } else {
            None
        },
        tokens: r.summary.tokens,
        cost: r.summary.cost,
        tool_calls: r.summary.tool_calls.len(),
        exit_code: r.exit.and_then(|e| e.code),
        // A Claude run uses no opencode.
        opencode_version: version.filter(|_| r.runner == Runner::Opencode),
    }
}

impl Record {
    fn claude_session(&self) -> Option<&str> {
        self.summary.session_id.as_deref()
    }

    /// Folds one stdout line with the parser of the task's runner.
    fn push_out(&mut self, line: &str) -> bool {
        match self.runner {
            Runner::Opencode => self.summary.push_line(line),
            Runner::Claude => self.claude.push_line(&mut self.summary, line),
        }
    }

    /// The failure of a finished attempt, by the rules of the task's runner.
    fn classify_attempt(&self, stderr: &str, exit: ExitInfo) -> Option<Failure> {
        match self.runner {
            Runner::Opencode => classify(&self.summary, stderr, exit),
            Runner::Claude => {
                claude::classify(&self.summary, &self.claude, stderr, exit).map(|c| c.failure)
            }
        }
    }

    /// When the quota window that refused this task resets, if the refusal said so.
    fn quota_reset(&self) -> Option<SystemTime> {
        match self.runner {
            Runner::Claude => {
                let text = self.claude.result.as_ref().map(|r| r.text.as_str());
                self.claude
                    .limit_reset
                    .or_else(|| text.and_then(claude::reset_in_text))
                    .map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s))
            }
            Runner::Opencode => self
                .summary
                .errors
                .last()
                .and_then(|e| e.raw.get("data").and_then(|d| d.get("responseHeaders")))
                .and_then(|h| quota::reset_from_headers(h, SystemTime::now())),
        }
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
    let Some(until) = r.quota_reset().filter(|t| *t > SystemTime::now()) else {
        return;
    };
    let key = quota::account_key(r.runner, r.model.as_deref());
    inner.quota_until.insert(key, until);
}

fn finish(shared: &Shared, id: TaskId, state: TaskState, failure: Option<Failure>) {
    note_quota_window(shared, id, failure.as_ref());
    shared.with(id, |r| {
        r.state = state;
        r.failure = failure;
        // A finished task keeps its text; raw events and most of stderr are no longer needed.
        r.stdout_dropped = r.stdout.dropped_bytes();
        r.stdout = HeadTail::new(2);
        if r.stderr.kept_bytes() > FINISHED_STDERR {
            let tail = r.stderr.tail_string(FINISHED_STDERR);
            r.stderr = HeadTail::new(FINISHED_STDERR + 16);
            r.stderr.push(tail.as_bytes());
        }
        r.finished = Some(Instant::now());
        r.retry_at = None;
        r.done.send_replace(true);
    });
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
    mut stop_rx: watch::Receiver<Option<StopReason>>,
) {
    let cfg = shared.config.clone();
    let timeout = spec.timeout.unwrap_or(cfg.default_timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let caps = if runner == Runner::Claude {
        // Claude Code's flags are fixed; nothing to detect.
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
            finish(
                &shared,
                id,
                TaskState::Failed,
                Some(Failure::new(FailureKind::Spawn, e)),
            );
            return;
        }
    };
    let mut attempt: u32 = 0;
    let mut startup_retries = 0u32;
    loop {
        if let Some(reason) = *stop_rx.borrow() {
            finish_stopped(&shared, id, reason);
            return;
        }
        attempt += 1;
        let end = run_attempt(
            &shared,
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
                finish_stopped(&shared, id, reason);
                return;
            }
            AttemptEnd::TimedOut => {
                let f = Failure::new(
                    FailureKind::Timeout,
                    format!(
                        "stopped after {} (the task's time limit)",
                        fmt_duration(timeout)
                    ),
                );
                finish(&shared, id, TaskState::TimedOut, Some(f));
                return;
            }
            AttemptEnd::SpawnFailed(msg) => {
                finish(
                    &shared,
                    id,
                    TaskState::Failed,
                    Some(Failure::new(FailureKind::Spawn, msg)),
                );
                return;
            }
            AttemptEnd::OverflowLoop(n) => {
                let last = shared
                    .with(id, |r| r.summary.errors.last().map(|e| e.message.clone()))
                    .flatten()
                    .unwrap_or_default();
                let f = Failure::new(
                    FailureKind::ContextLength,
                    format!(
                        "stopped after {n} context overflows in a row: opencode kept compacting and retrying. Last: {last}"
                    ),
                );
                finish(&shared, id, TaskState::Failed, Some(f));
                return;
            }
            AttemptEnd::Exited(exit) => {
                let (failure, produced, store_race) = shared
                    .with(id, |r| {
                        r.exit = Some(exit);
                        let stderr = r.stderr.to_string_lossy();
                        let race = r.summary.events == 0
                            && exit.code != Some(0)
                            && store_setup_error(&stderr);
                        (
                            r.classify_attempt(&stderr, exit),
                            r.summary.produced_output,
                            race,
                        )
                    })
                    .unwrap_or((None, false, false));
                let Some(f) = failure else {
                    finish(&shared, id, TaskState::Succeeded, None);
                    return;
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
                            finish_stopped(&shared, id, reason);
                            return;
                        }
                    }
                    attempt -= 1;
                    continue;
                }
                let retryable =
                    f.kind.is_transient() && spec.read_only && !produced && attempt <= cfg.retries;
                if !retryable {
                    finish(&shared, id, TaskState::Failed, Some(f));
                    return;
                }
                let delay = cfg
                    .retry_delay
                    .saturating_mul(3u32.saturating_pow(attempt - 1));
                let at = tokio::time::Instant::now() + delay;
                if at >= deadline {
                    finish(&shared, id, TaskState::Failed, Some(f));
                    return;
                }
                shared.with(id, |r| {
                    r.state = TaskState::Retrying;
                    r.retry_at = Some(Instant::now() + delay);
                    r.failure = Some(f);
                });
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = stop_rx.changed() => {
                        let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                        finish_stopped(&shared, id, reason);
                        return;
                    }
                }
            }
        }
    }
}

fn finish_stopped(shared: &Shared, id: TaskId, reason: StopReason) {
    let f = match reason {
        StopReason::Cancel => None,
        StopReason::Shutdown => Some(Failure::with_advice(
            FailureKind::Exit,
            "stopped because the bridge shut down",
            "Start the task again once the bridge is running.",
        )),
    };
    finish(shared, id, TaskState::Cancelled, f);
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
    let launch = if shared.with(id, |r| r.runner) == Some(Runner::Claude) {
        let model = spec.model.as_deref().or(cfg.default_model.as_deref());
        Ok(claude::build_launch(spec, cwd, bin, model, &cfg.env))
    } else {
        command::build_launch(spec, cwd, &ctx)
    };
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
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(false);
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
        r.claude = ClaudeStream::default();
        r.stdout = HeadTail::new(RAW_STDOUT_CAP.min(cfg.output_cap));
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
    shared.with(id, |r| r.root = Some(root));

    if let Some(mut stdin) = child.stdin.take() {
        let bytes = launch.stdin.clone();
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        });
    }
    let out_reader = child
        .stdout
        .take()
        .map(|s| tokio::spawn(read_stream(Arc::clone(shared), id, s, true)));
    let err_reader = child
        .stderr
        .take()
        .map(|s| tokio::spawn(read_stream(Arc::clone(shared), id, s, false)));

    let mut known: BTreeSet<ProcId> = BTreeSet::new();
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
                procs::refresh_known(root, &mut known);
                let overflows = shared.with(id, |r| r.summary.overflows).unwrap_or(0);
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
    for reader in [out_reader, err_reader].into_iter().flatten() {
        let abort = reader.abort_handle();
        if tokio::time::timeout(Duration::from_millis(1500), reader)
            .await
            .is_err()
        {
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

/// Longest partial line kept while waiting for its newline; longer lines are counted as
/// malformed and skipped up to the next newline.
const MAX_LINE: usize = 8 * 1024 * 1024;

async fn read_stream(
    shared: Arc<Shared>,
    id: TaskId,
    mut stream: impl AsyncRead + Unpin,
    is_stdout: bool,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut skipping = false;
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let mut inner = shared.lock();
        let Some(r) = inner.tasks.get_mut(&id) else {
            break;
        };
        if !is_stdout {
            r.stderr.push(chunk);
            continue;
        }
        r.stdout.push(chunk);
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let (line, tail) = rest.split_at(pos);
            rest = &tail[1..];
            if skipping {
                skipping = false;
                pending.clear();
                continue;
            }
            pending.extend_from_slice(line);
            let text = String::from_utf8_lossy(&pending);
            if r.push_out(&text) {
                r.last_event = Some(Instant::now());
            }
            pending.clear();
        }
        if !skipping {
            pending.extend_from_slice(rest);
            if pending.len() > MAX_LINE {
                r.summary.malformed += 1;
                pending.clear();
                skipping = true;
            }
        }
    }
    if is_stdout && !pending.is_empty() && !skipping {
        let text = String::from_utf8_lossy(&pending).into_owned();
        shared.with(id, |r| {
            if r.push_out(&text) {
                r.last_event = Some(Instant::now());
            }
        });
    }
}
