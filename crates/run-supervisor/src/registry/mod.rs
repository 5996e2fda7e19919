//! The durable task registry: every task of every bridge that shares a state directory.
//!
//! Layout under the state directory (`OPENCODE_BRIDGE_STATE_DIR`, default
//! `$XDG_STATE_HOME/opencode-bridge`):
//!
//! - `next-id`: the last task id handed out. Ids come from this counter under an exclusive
//!   `flock`, so they stay small, readable numbers and are unique across restarts and across
//!   bridges on one state directory.
//! - `tasks/<id>/task.json`: the task's record ([`TaskRecord`]): who owns it (the bridge
//!   process, by pid and start time), what it runs, its state, the current run's pid and start
//!   time, its outcome.
//! - `tasks/<id>/output.json`: its kept output ([`TaskOutputRecord`]), written while it runs (every
//!   few seconds when something new arrived) and when it ends.
//!
//! Every file is written whole to a temporary name and renamed over the old one, so a reader
//! (another bridge, or this one after a `kill -9`) sees either the old or the new version,
//! never a torn one. A bridge writes only the files of its own tasks; the one exception is a
//! task whose owning bridge is dead: a later bridge may record its end (cancelled by it, or
//! lost), which is the last write the task ever gets.
//!
//! Pruning removes finished tasks older than the configured age, and nothing else.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::classify::{Failure, FailureKind};
use crate::task::TaskState;
use bridge_isolation::ToolCall;
use bridge_isolation::changes::ChangedFiles;
use bridge_ledger::usage::TokenUsage;
use bridge_proc::ProcId;

mod client;
mod writer;
pub use client::{Unsettled, unsettled};
pub(crate) use writer::{WRITER_THREAD, Writer};

pub use bridge_ledger::utc::{from_ms, now_ms, to_ms};

/// A process by pid and start time, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredProc {
    pub pid: i32,
    pub start_time: u64,
}

impl From<ProcId> for StoredProc {
    fn from(p: ProcId) -> Self {
        StoredProc {
            pid: p.pid,
            start_time: p.start_time,
        }
    }
}

impl From<StoredProc> for ProcId {
    fn from(p: StoredProc) -> Self {
        ProcId {
            pid: p.pid,
            start_time: p.start_time,
        }
    }
}

/// A failure, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredFailure {
    pub kind: String,
    pub message: String,
    pub advice: String,
}

impl From<&Failure> for StoredFailure {
    fn from(f: &Failure) -> Self {
        StoredFailure {
            kind: f.kind.as_str().to_owned(),
            message: f.message.clone(),
            advice: f.advice.clone(),
        }
    }
}

impl StoredFailure {
    pub fn to_failure(&self) -> Failure {
        let kind = FailureKind::ALL
            .into_iter()
            .find(|k| k.as_str() == self.kind)
            .unwrap_or(FailureKind::Exit);
        Failure {
            kind,
            message: self.message.clone(),
            advice: self.advice.clone(),
        }
    }
}

/// Token counts, as stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredTokens {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl From<TokenUsage> for StoredTokens {
    fn from(t: TokenUsage) -> Self {
        StoredTokens {
            input: t.input,
            output: t.output,
            reasoning: t.reasoning,
            cache_read: t.cache_read,
            cache_write: t.cache_write,
        }
    }
}

impl From<StoredTokens> for TokenUsage {
    fn from(t: StoredTokens) -> Self {
        TokenUsage {
            input: t.input,
            output: t.output,
            reasoning: t.reasoning,
            cache_read: t.cache_read,
            cache_write: t.cache_write,
        }
    }
}

/// The format version this bridge writes in `task.json` and `output.json`. Files without a
/// `version` field are version 1 (written before the field existed) and read the same way: the
/// fields of version 2 are those of version 1 plus `version`. A newer version is read as far as
/// its known fields go (unknown fields are ignored), so an older bridge still lists the task.
/// Version 3 adds `usage` and `attempt_usage` to `task.json` (absent: not known).
pub(crate) const FORMAT_VERSION: u32 = 3;

fn version_1() -> u32 {
    1
}

/// A task's `verify`, `verify_retries` and `output_schema`, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredChecks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<String>,
    #[serde(default)]
    pub verify_retries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
}

/// `tasks/<id>/task.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskRecord {
    /// [`FORMAT_VERSION`] when written by this bridge; 1 when the file has none.
    #[serde(default = "version_1")]
    pub version: u32,
    pub id: u64,
    /// The bridge process that runs the task.
    pub owner: StoredProc,
    pub label: Option<String>,
    pub agent: String,
    pub title: String,
    pub cwd: PathBuf,
    pub model: Option<String>,
    pub read_only: bool,
    /// The session this task continues, when it is a follow-up.
    pub continues: Option<String>,
    /// [`TaskState::as_str`].
    pub state: String,
    pub attempts: u32,
    pub accepted_ms: u64,
    pub finished_ms: Option<u64>,
    pub session_id: Option<String>,
    /// The running attempt's `opencode run` process.
    pub run: Option<StoredProc>,
    /// The warm local `opencode serve` a served task runs on (engine `serve`); absent for
    /// other engines and in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<StoredProc>,
    pub failure: Option<StoredFailure>,
    /// Its bridge and its run went away before it ended: the outcome is unknown (a failure
    /// of kind `exit` whose message says so). Version 1 files said it only by the message's
    /// `lost:` prefix; [`Registry::read_task`] sets this for them.
    #[serde(default)]
    pub lost: bool,
    pub exit_code: Option<i32>,
    pub tokens: StoredTokens,
    pub cost: f64,
    pub tool_calls: usize,
    pub opencode_version: Option<String>,
    /// Whether the kernel fence confined the latest attempt ([`bridge_fence::Confinement`] as
    /// text: `confined (Landlock ABI 7)` or `not confined: <why>`); absent before the first
    /// attempt and in files written before the fence existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// `serve` or `serve:<server>` for a task run as a session on a server; absent for `run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The Claude Code session that delegated the task: `CLAUDE_CODE_SESSION_ID` of the bridge
    /// that accepted it (Claude Code sets it for the stdio servers it starts). Absent when the
    /// bridge was not started by Claude Code, and in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_session: Option<String>,
    /// When the finished task's result was first handed to the caller (`opencode_result`, a
    /// sync start's answer, an MCP task's result); absent while nobody has read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_read_ms: Option<u64>,
    /// What the task used and cost, its attempts added up ([`bridge_ledger::usage::Usage`]); absent
    /// before version 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<bridge_ledger::usage::Usage>,
    /// Each attempt's usage, first to last.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempt_usage: Vec<bridge_ledger::usage::Usage>,
    /// The caller's `request_id` and what its start asked ([`crate::spec::RequestKey`]);
    /// absent for a start without one and in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<crate::spec::RequestKey>,
    /// How the caller's verify command last ended ([`crate::verify::VerifyOutcome`]); absent
    /// for a task without one, before it ran, and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<crate::verify::VerifyOutcome>,
    /// Whether the answer satisfied the caller's output schema; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_valid: Option<bool>,
    /// The caller's checks of the work, so a bridge that adopts the task runs them too;
    /// absent without any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<StoredChecks>,
    /// The caller's `max_cost_usd`, so a bridge that adopts the task holds it to the same cap
    /// (and reserves it); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    pub updated_ms: u64,
}

impl TaskRecord {
    /// The record of a task just accepted by the bridge `owner`: nothing has run yet.
    pub fn accepted(id: u64, owner: ProcId, agent: &str, title: &str, cwd: &Path) -> TaskRecord {
        TaskRecord {
            version: FORMAT_VERSION,
            id,
            owner: owner.into(),
            label: None,
            agent: agent.to_owned(),
            title: title.to_owned(),
            cwd: cwd.to_owned(),
            model: None,
            read_only: false,
            continues: None,
            state: TaskState::Starting.as_str().into(),
            attempts: 0,
            accepted_ms: now_ms(),
            finished_ms: None,
            session_id: None,
            run: None,
            server: None,
            failure: None,
            lost: false,
            exit_code: None,
            tokens: StoredTokens::default(),
            cost: 0.0,
            tool_calls: 0,
            opencode_version: None,
            sandbox: None,
            engine: None,
            client_session: None,
            result_read_ms: None,
            usage: None,
            attempt_usage: Vec::new(),
            request: None,
            verify: None,
            schema_valid: None,
            checks: None,
            max_cost_usd: None,
            updated_ms: now_ms(),
        }
    }

    pub fn state(&self) -> TaskState {
        TaskState::parse(&self.state).unwrap_or(TaskState::Failed)
    }
}

/// Who is in charge of a task found in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// It has finished.
    Finished,
    /// The bridge that started it still runs (pid).
    Alive(i32),
    /// Its bridge is gone, its run still runs.
    Orphan(ProcId),
    /// Its bridge is gone, and it runs as a session on a server: a remote one (a bridge with
    /// that server in its config follows it again), or the warm local one it ran on, still
    /// running ([`crate::supervisor::Supervisor::follow_left_tasks`]).
    Resumable,
    /// Its bridge is gone and so is its run: the outcome is unknown.
    Lost,
}

/// Who answers for a task of the registry (by the start times of its bridge and its run).
pub(crate) fn judge(t: &TaskRecord) -> Owner {
    if t.state().is_finished() {
        return Owner::Finished;
    }
    let owner = ProcId::from(t.owner);
    if owner.is_alive() {
        return Owner::Alive(owner.pid);
    }
    if t.session_id.is_some() && t.engine.as_deref().is_some_and(|e| e.starts_with("serve:")) {
        return Owner::Resumable;
    }
    if t.engine.as_deref() == Some("serve") {
        let server = t.server.map(ProcId::from).filter(ProcId::is_alive);
        return if server.is_some() && t.session_id.is_some() {
            Owner::Resumable
        } else {
            Owner::Lost
        };
    }
    match t.run.map(ProcId::from).filter(ProcId::is_alive) {
        Some(run) => Owner::Orphan(run),
        None => Owner::Lost,
    }
}

/// Records a task as lost, ended at `at_ms`.
pub(crate) fn settle_lost(t: &mut TaskRecord, at_ms: u64) {
    t.state = TaskState::Failed.as_str().into();
    let failure = match (t.engine.as_deref(), t.server) {
        (Some("serve"), Some(server)) => Failure::with_advice(
            FailureKind::Exit,
            format!(
                "lost: the local opencode serve it ran on (pid {}) stopped while no bridge followed the task (its bridge, pid {}, had stopped), so nobody saw how the turn ended; its outcome is unknown",
                server.pid, t.owner.pid
            ),
            "Read what the session did with opencode_session_output (its id is in the status), continue it with a follow-up in that session, or start the task again.",
        ),
        _ => Failure::with_advice(
            FailureKind::Exit,
            format!(
                "lost: the bridge that ran it (pid {}) stopped before the run ended, and the run is gone too; its outcome is unknown",
                t.owner.pid
            ),
            "Read what the session did with opencode_session_output (its id is in the status, when one was known), or start the task again.",
        ),
    };
    t.failure = Some(StoredFailure::from(&failure));
    t.server = None;
    t.lost = true;
    t.finished_ms = Some(at_ms);
    t.run = None;
    t.version = FORMAT_VERSION;
    t.updated_ms = now_ms();
}

/// One tool call, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredToolCall {
    pub tool: String,
    pub status: String,
    pub title: Option<String>,
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
}

impl From<&ToolCall> for StoredToolCall {
    fn from(c: &ToolCall) -> Self {
        StoredToolCall {
            tool: c.tool.clone(),
            status: c.status.clone(),
            title: c.title.clone(),
            error: c.error.clone(),
            added: c.added,
            removed: c.removed,
        }
    }
}

impl From<&StoredToolCall> for ToolCall {
    fn from(c: &StoredToolCall) -> Self {
        ToolCall {
            tool: c.tool.clone(),
            status: c.status.clone(),
            title: c.title.clone(),
            error: c.error.clone(),
            added: c.added,
            removed: c.removed,
        }
    }
}

/// `tasks/<id>/output.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskOutputRecord {
    /// [`FORMAT_VERSION`] when written by this bridge; 1 when the file has none.
    #[serde(default = "version_1")]
    pub version: u32,
    pub text: String,
    pub final_text: String,
    pub tool_calls: Vec<StoredToolCall>,
    pub stderr_tail: String,
    pub malformed_lines: usize,
    pub unknown_events: usize,
    pub stdout_bytes_dropped: u64,
    pub changed_files: Option<ChangedFiles>,
    /// The post-run audit's line (`audited: …` / `not audited: …`); absent before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<String>,
    /// The end of the last verify run's output (redacted); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_output: Option<String>,
    /// The answer parsed and valid against the caller's output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

/// Why the registry cannot be used. The message names the directory and what to do.
#[derive(Debug, thiserror::Error)]
#[error("the task registry in {} cannot be used ({source}): fix its permissions or set OPENCODE_BRIDGE_STATE_DIR to a writable directory", dir.display())]
pub struct RegistryError {
    dir: PathBuf,
    source: std::io::Error,
}

/// The registry of one state directory.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    dir: PathBuf,
    /// This process.
    pub me: ProcId,
}

fn private_dir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
}

impl Registry {
    /// Opens (creating it if needed) the registry in `dir`.
    pub fn open(dir: &Path) -> Result<Registry, RegistryError> {
        let err = |source| RegistryError {
            dir: dir.to_path_buf(),
            source,
        };
        private_dir(&dir.join("tasks")).map_err(err)?;
        let me = ProcId::of(std::process::id() as i32).ok_or_else(|| {
            err(std::io::Error::other(
                "cannot read this process's start time from /proc",
            ))
        })?;
        Ok(Registry {
            dir: dir.to_path_buf(),
            me,
        })
    }

    fn task_dir(&self, id: u64) -> PathBuf {
        self.dir.join("tasks").join(id.to_string())
    }

    /// Hands out the next task id (under an exclusive lock on `next-id`).
    pub fn next_id(&self) -> Result<u64, RegistryError> {
        let path = self.dir.join("next-id");
        let err = |source| RegistryError {
            dir: self.dir.clone(),
            source,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(err)?;
        let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| err(std::io::Error::from(e)))?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(err)?;
        let last = text.trim().parse::<u64>().unwrap_or(0);
        // Never reuse an id that has a directory (the counter file may have been removed).
        let highest = self.ids().into_iter().max().unwrap_or(0);
        let id = last.max(highest) + 1;
        file.rewind().map_err(err)?;
        file.set_len(0).map_err(err)?;
        file.write_all(format!("{id}\n").as_bytes()).map_err(err)?;
        file.sync_data().map_err(err)?;
        private_dir(&self.task_dir(id)).map_err(err)?;
        Ok(id)
    }

    /// Writes `name` of a task through a temporary file and a rename, so a reader never sees
    /// half a file. `write` fills the (buffered) temporary file.
    fn write_atomic(
        &self,
        id: u64,
        name: &str,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = self.task_dir(id);
        private_dir(&dir)?;
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            let mut w = std::io::BufWriter::with_capacity(64 * 1024, f);
            write(&mut w)?;
            w.flush()?;
        }
        std::fs::rename(&tmp, dir.join(name))
    }

    /// Writes `task.json` of a task. Returns false (after a warning in the log) when it could
    /// not be written.
    pub fn write_task(&self, t: &TaskRecord) -> bool {
        let written = self.write_atomic(t.id, "task.json", |w| {
            serde_json::to_writer_pretty(w, t).map_err(std::io::Error::other)
        });
        if let Err(e) = &written {
            tracing::warn!(task = t.id, "cannot record the task: {e}");
        }
        written.is_ok()
    }

    /// Writes `output.json` of a task, encoding straight into the file (an output holds up to
    /// a few MB of text; no second copy of it is made). Returns false (after a warning in the
    /// log) when it could not be written.
    pub fn write_output(&self, id: u64, o: &TaskOutputRecord) -> bool {
        let written = self.write_atomic(id, "output.json", |w| {
            serde_json::to_writer(w, o).map_err(std::io::Error::other)
        });
        if let Err(e) = &written {
            tracing::warn!(task = id, "cannot record the task's output: {e}");
        }
        written.is_ok()
    }

    /// The stored record of a task (`None`: unknown id or unreadable record).
    pub fn read_task(&self, id: u64) -> Option<TaskRecord> {
        let bytes = std::fs::read(self.task_dir(id).join("task.json")).ok()?;
        let mut t: TaskRecord = serde_json::from_slice(&bytes).ok()?;
        if t.version < 2 {
            t.lost = t
                .failure
                .as_ref()
                .is_some_and(|f| f.message.starts_with("lost:"));
        }
        Some(t)
    }

    /// The stored output of a task.
    pub fn read_output(&self, id: u64) -> Option<TaskOutputRecord> {
        let bytes = std::fs::read(self.task_dir(id).join("output.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Ids of every task directory, ascending.
    pub fn ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = std::fs::read_dir(self.dir.join("tasks"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    }

    /// Removes finished tasks that ended more than `age` ago. Returns how many were removed.
    #[cfg(test)]
    pub fn prune(&self, age: Duration) -> usize {
        self.sweep(age, |_| false).0
    }

    /// One pass over every task: removes finished tasks that ended more than `age` ago, and
    /// writes back every unfinished task that `settle` changed (returned true for). Returns
    /// how many were removed and how many settled.
    pub fn sweep(
        &self,
        age: Duration,
        mut settle: impl FnMut(&mut TaskRecord) -> bool,
    ) -> (usize, usize) {
        let cutoff = now_ms().saturating_sub(age.as_millis() as u64);
        let (mut removed, mut settled) = (0, 0);
        for id in self.ids() {
            let Some(mut t) = self.read_task(id) else {
                continue;
            };
            if !t.state().is_finished() {
                if settle(&mut t) && self.write_task(&t) {
                    settled += 1;
                }
                continue;
            }
            let ended = t.finished_ms.filter(|_| t.state().is_finished());
            if let Some(end) = ended
                && end < cutoff
                && std::fs::remove_dir_all(self.task_dir(id)).is_ok()
            {
                removed += 1;
            }
        }
        (removed, settled)
    }

    /// The sweep a supervisor makes when it opens the registry: finished tasks older than
    /// `age` go, and unfinished tasks whose bridge and run are both gone are recorded lost.
    /// This is where orphaned and lost are decided on disk; reads never write. Returns how
    /// many were removed and how many recorded lost.
    pub fn reconcile(&self, age: Duration) -> (usize, usize) {
        self.sweep(age, |t| {
            let lost = judge(t) == Owner::Lost;
            if lost {
                settle_lost(t, now_ms());
            }
            lost
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn task(
        reg: &Registry,
        id: u64,
        state: TaskState,
        finished_ms: Option<u64>,
    ) -> TaskRecord {
        TaskRecord {
            version: FORMAT_VERSION,
            id,
            owner: reg.me.into(),
            label: Some("l".into()),
            agent: "worker".into(),
            title: "T/worker: x".into(),
            cwd: PathBuf::from("/p"),
            model: None,
            read_only: false,
            continues: None,
            state: state.as_str().into(),
            attempts: 1,
            accepted_ms: now_ms(),
            finished_ms,
            session_id: None,
            run: None,
            server: None,
            failure: Some(StoredFailure::from(&Failure::new(FailureKind::Quota, "q"))),
            lost: false,
            exit_code: Some(1),
            tokens: StoredTokens::default(),
            cost: 0.0,
            tool_calls: 0,
            opencode_version: None,
            sandbox: None,
            engine: None,
            client_session: None,
            result_read_ms: None,
            usage: None,
            attempt_usage: Vec::new(),
            request: None,
            verify: None,
            schema_valid: None,
            checks: None,
            max_cost_usd: None,
            updated_ms: now_ms(),
        }
    }

    #[test]
    fn ids_are_unique_and_records_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let a = Registry::open(dir.path()).unwrap();
        let b = Registry::open(dir.path()).unwrap();
        let ids: Vec<u64> = (0..6)
            .map(|i| if i % 2 == 0 { a.next_id() } else { b.next_id() }.unwrap())
            .collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
        let t = task(&a, 3, TaskState::Failed, Some(now_ms()));
        a.write_task(&t);
        assert_eq!(b.read_task(3), Some(t.clone()));
        assert_eq!(
            b.read_task(3).unwrap().failure.unwrap().to_failure().kind,
            FailureKind::Quota
        );
        // The counter file going away does not bring an id back.
        std::fs::remove_file(dir.path().join("next-id")).unwrap();
        assert_eq!(a.next_id().unwrap(), 7);
        assert_eq!(a.ids(), [1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn a_record_written_before_the_version_field_reads_as_version_1() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(dir.path()).unwrap();
        let id = reg.next_id().unwrap();
        let mut old =
            serde_json::to_value(task(&reg, id, TaskState::Succeeded, Some(now_ms()))).unwrap();
        old.as_object_mut().unwrap().remove("version");
        std::fs::write(reg.task_dir(id).join("task.json"), old.to_string()).unwrap();
        std::fs::write(reg.task_dir(id).join("output.json"), r#"{"text":"t","final_text":"f","tool_calls":[],"stderr_tail":"","malformed_lines":0,"unknown_events":0,"stdout_bytes_dropped":0,"changed_files":null}"#).unwrap();
        let t = reg.read_task(id).expect("an old record still reads");
        assert_eq!((t.version, t.state()), (1, TaskState::Succeeded));
        let o = reg.read_output(id).expect("an old output still reads");
        assert_eq!((o.version, o.final_text.as_str()), (1, "f"));
        // What this bridge writes carries the current version.
        reg.write_task(&task(&reg, id, TaskState::Failed, Some(now_ms())));
        let text = std::fs::read_to_string(reg.task_dir(id).join("task.json")).unwrap();
        assert!(
            text.contains(&format!("\"version\": {FORMAT_VERSION}")),
            "{text}"
        );
    }

    #[test]
    fn pruning_removes_only_old_finished_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::open(dir.path()).unwrap();
        let old = now_ms() - 10 * 86_400_000;
        for (id, state, fin) in [
            (1, TaskState::Succeeded, Some(old)),
            (2, TaskState::Succeeded, Some(now_ms())),
            (3, TaskState::Running, None),
            (4, TaskState::Cancelled, Some(old)),
        ] {
            r.write_task(&task(&r, id, state, fin));
        }
        // A directory without a readable record is not ours to judge: kept.
        std::fs::create_dir_all(dir.path().join("tasks/9")).unwrap();
        assert_eq!(r.prune(Duration::from_secs(7 * 86_400)), 2);
        let mut left = r.ids();
        left.sort();
        assert_eq!(left, [2, 3, 9]);
    }
}
