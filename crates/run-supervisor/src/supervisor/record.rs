//! A task in memory: its [`TaskRecord`] (what `task.json` holds) with the live state of its
//! attempts layered on it, and the one code path from a record to what callers see.
//!
//! A task of this supervisor and a task read from the registry are shown the same way: both
//! become a [`TaskRecord`] (and a [`TaskOutputRecord`]) first — the in-memory one through
//! [`Record::record`] / [`Record::output`], which are also exactly what is persisted — and
//! [`view`] / [`output_view`] turn those into a [`TaskSnapshot`] / [`TaskOutput`]. Only what
//! exists solely while a task runs here (its pid, the age of its last event, the retry timer)
//! is added on top, by [`Record::snapshot`].

use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::classify::{ExitInfo, Failure};
use crate::registry::{self, Owner, TaskOutputRecord, TaskRecord};
use crate::runner::Runner;
use crate::runner::opencode::events::{RunSummary, ToolCall};
use crate::runner::{Stream, backend};
use crate::task::{TaskOutput, TaskSnapshot, TaskState};
use bridge_isolation::changes::ChangedFiles;
use bridge_ledger::usage::{Pricing, Usage};
use bridge_proc::ProcId;
use bridge_proc::stream::{HeadTail, REPLY_CHARS, cut_text};

/// Why a task is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    Cancel,
    Shutdown,
    /// A budget window it counts against is spent (the message is the record's
    /// `budget_stop`).
    Budget,
}

/// A task of this supervisor.
#[derive(Debug)]
pub(super) struct Record {
    /// The task as accepted: its identity and what it runs (owner, agent, title, cwd, model,
    /// label, ...). The fields that change while it runs (state, attempts, outcome, counters)
    /// are the live ones below; [`Record::record`] lays them over this one.
    pub(super) rec: TaskRecord,
    pub(super) runner: Runner,
    /// The parser of the current attempt's output (the runner's).
    pub(super) stream: Box<dyn Stream>,
    pub(super) state: TaskState,
    pub(super) attempts: u32,
    pub(super) accepted: Instant,
    pub(super) finished: Option<Instant>,
    pub(super) attempt_started: Option<Instant>,
    pub(super) root: Option<ProcId>,
    pub(super) last_event: Option<Instant>,
    pub(super) summary: RunSummary,
    pub(super) stderr: HeadTail,
    pub(super) failure: Option<Failure>,
    pub(super) retry_at: Option<Instant>,
    pub(super) exit: Option<ExitInfo>,
    pub(super) stop: watch::Sender<Option<StopReason>>,
    pub(super) done: watch::Sender<bool>,
    pub(super) changes: Option<ChangedFiles>,
    /// The post-run audit's line, once the task ended ([`bridge_isolation::audit`]).
    pub(super) audit: Option<String>,
    /// What the registry last got: events folded, session id known.
    pub(super) persisted_events: usize,
    pub(super) persisted_session: bool,
    /// The registry holds the current session id (or there is no registry): only then do
    /// snapshots show it, so a status that names the session means a restarted bridge knows
    /// it too (the writer sets it once `task.json` with the id is on disk).
    pub(super) durable_session: bool,
    /// The finished record and its output are in the registry (it may leave memory).
    pub(super) saved: bool,
    /// A remote served task adopted from a bridge that is gone: its next attempt follows the
    /// session it already has instead of sending the prompt again.
    pub(super) resume: bool,
    /// A line for the next attempt's stderr (why it runs as it does), kept past the reset of
    /// [`Record::begin_attempt`].
    pub(super) next_attempt_note: Option<String>,
    /// The pid of the warm local server the current attempt runs on (served tasks).
    pub(super) server_pid: Option<u32>,
    /// opencode is waiting to retry a request the provider refused (its retry status), shown
    /// in the task's status until it is busy again.
    pub(super) provider_wait: Option<bridge_ledger::quota::ProviderWait>,
    /// An `opencode run` held by a provider's refusals (read from opencode's log), with how
    /// many events the run had printed when the first was logged: an event after it ends the
    /// wait.
    pub(super) provider_stall: Option<(bridge_ledger::quota::ProviderStall, usize)>,
    /// The reset of a provider's limit that ended the task (a wait too long to sit through):
    /// what the quota window learns, before what the attempt's own output says.
    pub(super) provider_reset: Option<bridge_ledger::quota::Reset>,
    /// A remote served task left running on its server at this bridge's shutdown: it is not
    /// finished, and the next bridge follows it again.
    pub(super) detached: bool,
    /// Prices and the compare model ([`bridge_ledger::usage`]).
    pub(super) pricing: Pricing,
    /// The usage of the attempts before the current one, by attempt number.
    pub(super) prior: Vec<(u32, Usage)>,
    /// How the caller's verify command last ended, and the end of its output.
    pub(super) verify: Option<crate::verify::VerifyOutcome>,
    pub(super) verify_output: Option<String>,
    /// Whether the answer satisfied the output schema, and the answer parsed when it did.
    pub(super) schema_valid: Option<bool>,
    pub(super) structured: Option<serde_json::Value>,
    /// The tool calls of the turns before a check's follow-up (the same session's work).
    pub(super) earlier_calls: Vec<ToolCall>,
    /// What the task reserved at its start ([`bridge_ledger::usage::reserve`]): the key of its entry
    /// in the reservations file (`None`: no state directory) and the amount, USD.
    pub(super) reserved: (Option<u64>, f64),
    /// Why a spent budget window stopped the task (its failure's message).
    pub(super) budget_stop: Option<String>,
}

impl Record {
    /// A task just accepted, not started yet.
    pub(super) fn new(
        rec: TaskRecord,
        runner: Runner,
        output_cap: usize,
        stop: watch::Sender<Option<StopReason>>,
        durable_session: bool,
        pricing: Pricing,
    ) -> Record {
        let (done, _) = watch::channel(false);
        Record {
            rec,
            runner,
            stream: backend(runner).stream(),
            state: TaskState::Starting,
            attempts: 0,
            accepted: Instant::now(),
            finished: None,
            attempt_started: None,
            root: None,
            last_event: None,
            summary: RunSummary::new(output_cap),
            stderr: HeadTail::new(output_cap),
            failure: None,
            retry_at: None,
            exit: None,
            stop,
            done,
            changes: None,
            audit: None,
            persisted_events: 0,
            persisted_session: false,
            durable_session,
            saved: false,
            resume: false,
            next_attempt_note: None,
            server_pid: None,
            provider_wait: None,
            provider_stall: None,
            provider_reset: None,
            detached: false,
            pricing,
            prior: Vec::new(),
            verify: None,
            verify_output: None,
            schema_valid: None,
            structured: None,
            earlier_calls: Vec::new(),
            reserved: (None, 0.0),
            budget_stop: None,
        }
    }

    /// What the current attempt has used so far (0 before the first).
    pub(super) fn attempt_usage_now(&self) -> Usage {
        self.pricing.usage(
            self.summary.tokens(),
            self.summary.cost(),
            self.rec.model.as_deref(),
        )
    }

    /// Each attempt's usage, first to last (the current one last).
    pub(super) fn attempt_usages(&self) -> Vec<Usage> {
        let mut v: Vec<Usage> = self
            .prior
            .iter()
            .filter(|(n, _)| *n < self.attempts)
            .map(|(_, u)| u.clone())
            .collect();
        if self.attempts > 0 {
            v.push(self.attempt_usage_now());
        }
        v
    }

    /// Keeps the current attempt's usage before the next attempt starts.
    pub(super) fn keep_attempt_usage(&mut self) {
        if self.attempts == 0 {
            return;
        }
        let u = self.attempt_usage_now();
        self.prior.retain(|(n, _)| *n != self.attempts);
        self.prior.push((self.attempts, u));
    }

    /// The task's usage, every attempt added up.
    pub(super) fn task_usage(&self) -> Usage {
        let mut total = Usage {
            claude_equivalent: self.pricing.compare_price().map(|_| 0.0),
            ..Usage::default()
        };
        for u in self.attempt_usages() {
            total.add(&u);
        }
        total
    }

    /// A new attempt begins (its process spawned, or its session about to be prompted): the
    /// last attempt's usage is kept, its parser, output and outcome start afresh, and `sandbox`
    /// says how this one is confined.
    pub(super) fn begin_attempt(
        &mut self,
        attempt: u32,
        sandbox: String,
        output_cap: usize,
        durable_session: bool,
    ) {
        self.keep_attempt_usage();
        self.rec.sandbox = Some(sandbox);
        self.state = TaskState::Running;
        self.attempts = attempt;
        self.attempt_started = Some(Instant::now());
        self.last_event = None;
        self.summary = RunSummary::new(output_cap);
        self.durable_session = durable_session;
        self.stream = backend(self.runner).stream();
        self.stderr = HeadTail::new(output_cap);
        if let Some(note) = self.next_attempt_note.take() {
            self.stderr.push(note.as_bytes());
        }
        self.exit = None;
        self.retry_at = None;
        self.failure = None;
        self.provider_wait = None;
        self.provider_stall = None;
        self.provider_reset = None;
    }

    /// The task's record as it is now, in `state`: what is persisted, and what a snapshot is
    /// made of. `version` is the opencode version in use (kept for runs of opencode only).
    pub(super) fn record(&self, state: TaskState, version: Option<&str>) -> TaskRecord {
        let mut t = self.rec.clone();
        t.version = registry::FORMAT_VERSION;
        t.state = state.as_str().into();
        t.attempts = self.attempts;
        t.finished_ms = self.finished.map(|f| {
            let ran = f.saturating_duration_since(self.accepted).as_millis();
            t.accepted_ms
                .saturating_add(u64::try_from(ran).unwrap_or(u64::MAX))
        });
        // A served task knows its session before its first event (the server said it).
        t.session_id = self
            .summary
            .session_id()
            .clone()
            .or_else(|| self.rec.session_id.clone());
        t.run = self.root.filter(|_| !state.is_finished()).map(Into::into);
        t.failure = self.failure.as_ref().map(Into::into);
        t.lost = false;
        t.exit_code = self.exit.and_then(|e| e.code);
        t.tokens = self.summary.tokens().into();
        t.cost = self.summary.cost();
        t.tool_calls = self.earlier_calls.len() + self.summary.tool_calls().len();
        t.attempt_usage = self.attempt_usages();
        t.usage = Some(self.task_usage());
        t.verify = self.verify.clone();
        t.schema_valid = self.schema_valid;
        // A Claude run uses no opencode.
        t.opencode_version = version
            .filter(|_| backend(self.runner).traits().reports_opencode_version)
            .map(str::to_owned);
        t.updated_ms = registry::now_ms();
        t
    }

    /// The task's kept output as it is now: what `output.json` gets, and what a result is
    /// cut from.
    pub(super) fn output(&self) -> TaskOutputRecord {
        let stderr_clean = crate::classify::strip_ansi(&self.stderr.tail_string(16_000));
        // One lock of the text buffer for both (it is not reentrant).
        let (text, stdout_bytes_dropped) = {
            let text = self.summary.text();
            (text.to_string_lossy(), text.dropped_bytes())
        };
        TaskOutputRecord {
            version: registry::FORMAT_VERSION,
            text,
            final_text: self.summary.final_text().to_owned(),
            tool_calls: self.all_tool_calls().iter().map(Into::into).collect(),
            stderr_tail: cut_text(stderr_clean.trim(), None, Some(4_000)).text,
            malformed_lines: self.summary.malformed(),
            unknown_events: self.summary.unknown(),
            stdout_bytes_dropped,
            changed_files: self.changes.clone(),
            audit: self.audit.clone(),
            verify_output: self.verify_output.clone(),
            output: self.structured.clone(),
        }
    }

    /// What callers see of this task now: [`view`] of its [`record`](Self::record), plus what
    /// only a running task of this supervisor has.
    pub(super) fn snapshot(&self, quiet_after: Duration, version: Option<&str>) -> TaskSnapshot {
        let mut s = view(&self.record(self.state, version));
        let now = Instant::now();
        let running = self.state == TaskState::Running;
        if running {
            s.last_event_age = self
                .last_event
                .or(self.attempt_started)
                .map(|t| now.saturating_duration_since(t));
            s.pid = self.root.map(|p| p.pid);
        }
        s.quiet = s.last_event_age.is_some_and(|a| a >= quiet_after);
        s.elapsed = self
            .finished
            .unwrap_or(now)
            .saturating_duration_since(self.accepted);
        if !self.durable_session {
            s.session_id = None;
        }
        if self.state == TaskState::Retrying {
            s.retry_in = self.retry_at.map(|t| t.saturating_duration_since(now));
        }
        if running {
            s.provider_wait = self.provider_wait.clone();
            s.provider_stall = self.provider_stall.as_ref().map(|(w, _)| w.clone());
        }
        s
    }

    /// The task's tool calls: those of the turns before a check's follow-up, then the current
    /// attempt's.
    pub(super) fn all_tool_calls(&self) -> Vec<ToolCall> {
        let mut calls = self.earlier_calls.clone();
        calls.extend(self.summary.tool_calls().iter().cloned());
        calls
    }

    /// The failure of a finished attempt, by the rules of the task's runner.
    pub(super) fn classify_attempt(&self, stderr: &str, exit: ExitInfo) -> Option<Failure> {
        self.stream.classify(&self.summary, stderr, exit)
    }

    /// When the quota window that refused this task resets, if the refusal said so.
    pub(super) fn quota_reset(&self) -> Option<bridge_ledger::quota::Reset> {
        self.provider_reset
            .or_else(|| self.stream.quota_reset(&self.summary))
    }

    /// The wall-clock start of the current attempt, truncated to the millisecond (opencode
    /// stores times in ms), or `None` before the first attempt.
    pub(super) fn attempt_wall(&self) -> Option<SystemTime> {
        let at = self.attempt_started?;
        let wall =
            registry::from_ms(self.rec.accepted_ms) + at.saturating_duration_since(self.accepted);
        Some(registry::from_ms(registry::to_ms(wall)))
    }
}

/// A task as its record says: what a snapshot of any task, this supervisor's or one read from
/// the registry, is built from. Nothing live (pid, event age, retry timer) is set here.
pub(super) fn view(t: &TaskRecord) -> TaskSnapshot {
    let now = registry::now_ms();
    let end = t.finished_ms.unwrap_or(now).max(t.accepted_ms);
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
        pid: None,
        last_event_age: None,
        quiet: false,
        failure: t.failure.as_ref().map(registry::StoredFailure::to_failure),
        retry_in: None,
        provider_wait: None,
        provider_stall: None,
        tokens: t.tokens.into(),
        cost: t.cost,
        usage: t.usage.clone(),
        attempt_usage: t.attempt_usage.clone(),
        tool_calls: t.tool_calls,
        exit_code: t.exit_code,
        opencode_version: t.opencode_version.clone(),
        label: t.label.clone(),
        sandbox: t.sandbox.clone(),
        engine: t.engine.clone().unwrap_or_else(|| "run".to_owned()),
        continues: t.continues.clone(),
        orphaned: false,
        other_bridge: None,
        lost: t.lost,
        verify: t.verify.clone(),
        schema_valid: t.schema_valid,
    }
}

/// A task of the registry that this supervisor does not hold, as `owner` (see
/// [`registry::judge`]) leaves it: an orphan's run can be cancelled, another live bridge's
/// is named.
pub(super) fn stored_snapshot(t: &TaskRecord, owner: Owner) -> TaskSnapshot {
    let mut s = view(t);
    match owner {
        Owner::Orphan(run) => (s.pid, s.orphaned) = (Some(run.pid), true),
        Owner::Alive(bridge) => (s.pid, s.other_bridge) = (t.run.map(|r| r.pid), Some(bridge)),
        Owner::Finished | Owner::Lost | Owner::Resumable => {}
    }
    s
}

/// A task's output as a caller asked for it: all its text cut to `head` / `tail`, the final
/// message at most [`REPLY_CHARS`].
pub(super) fn output_view(
    snapshot: TaskSnapshot,
    o: &TaskOutputRecord,
    head: Option<usize>,
    tail: Option<usize>,
) -> TaskOutput {
    TaskOutput {
        snapshot,
        text: cut_text(&o.text, head, tail),
        final_text: cut_text(&o.final_text, Some(REPLY_CHARS), None).text,
        tool_calls: o.tool_calls.iter().map(ToolCall::from).collect(),
        stderr_tail: o.stderr_tail.clone(),
        malformed_lines: o.malformed_lines,
        unknown_events: o.unknown_events,
        stdout_bytes_dropped: o.stdout_bytes_dropped,
        changed_files: o.changed_files.clone(),
        audit: o.audit.clone(),
        verify_output: o.verify_output.clone(),
        output: o.output.clone(),
    }
}

/// The records of task `id` go to the registry's writer with `Save`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Save {
    /// `task.json` only.
    Record,
    /// `task.json` and `output.json`.
    WithOutput,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_of_an_own_task_is_the_view_of_its_record() {
        let rec = TaskRecord::accepted(
            7,
            ProcId::of(std::process::id() as i32).unwrap(),
            "explore",
            "t",
            std::path::Path::new("/tmp"),
        );
        let (stop, _) = watch::channel(None);
        let mut r = Record::new(rec, Runner::Opencode, 1024, stop, true, Pricing::default());
        r.attempts = 2;
        r.state = TaskState::Failed;
        r.failure = Some(Failure::new(crate::classify::FailureKind::Auth, "bad key"));
        r.finished = Some(r.accepted + Duration::from_millis(1500));
        let own = r.snapshot(Duration::from_secs(60), Some("1.18.33"));
        let stored = view(&r.record(r.state, Some("1.18.33")));
        assert_eq!(own.state, stored.state);
        assert_eq!(own.attempts, 2);
        assert_eq!(own.failure, stored.failure);
        assert_eq!(own.opencode_version.as_deref(), Some("1.18.33"));
        assert_eq!(stored.elapsed, Duration::from_millis(1500));
        assert_eq!(own.elapsed, Duration::from_millis(1500));
        // A Claude run names no opencode version.
        r.runner = Runner::Claude;
        assert_eq!(r.record(r.state, Some("1.18.33")).opencode_version, None);
    }
}
