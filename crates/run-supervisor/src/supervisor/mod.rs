//! The supervisor: the task table and the public API that answers callers (the dispatcher).
//! A task's pass is in stages, one module each: admission ([`admit`]) is called from
//! [`Supervisor::start`]; the rest (world, engine, attempts, output, audit and changes, ledger)
//! from [`pass`], in that order. A task left running by a bridge that is gone enters at the
//! attempts through [`adopt`]. One attempt of a task (spawn, watch, stop) is [`child`]'s; the
//! retry policy is [`attempt`]'s; a run's stdout and stderr are followed by [`output`]; a task's
//! end is [`ledger`]'s; a task in memory and the one way any task becomes a snapshot are in
//! [`record`]; the state they share is [`table`]'s; the budgets as they stand, [`budgets`]'.
//!
//! Each task runs in its own tokio task (works on a current-thread runtime). Stopping (cancel,
//! timeout, overflow loop, shutdown) goes through `bridge_proc::terminate_tree`: SIGTERM to the
//! group and every known descendant, a grace period, SIGKILL, then reaping.
//!
//! No file is written while the table is locked: records go to the registry's writer thread
//! over a channel ([`persist`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::command::{self, Capabilities};
use crate::error::StartError;
use crate::registry::{self, Owner, TaskRecord, judge, settle_lost};
use crate::runner::Runner;
use crate::runner::{OwnRun, backend};
use crate::spec::{SupervisorConfig, TaskSpec};
use crate::task::{
    CancelOutcome, Sessionless, TaskId, TaskOutput, TaskSnapshot, TaskState, WaitReport,
};
use bridge_ledger::usage::budget::{self, Verdict};
use bridge_proc::{self as procs, ProcId};
use opencode_client::proctable::{self, OpencodeProcess};

mod admit;
mod adopt;
mod attempt;
mod audited;
mod budgets;
mod child;
mod isolated;
mod ledger;
mod output;
mod pass;
mod record;
mod served;
mod stall;
mod table;
mod verify;

pub use admit::Started;
use record::{Save, StopReason, output_view, stored_snapshot};
pub use table::{FINISHED_IN_MEMORY, LEARN_AFTER_FINISH, MAX_FINISHED_TASKS};
use table::{Shared, persist, wait_done};

/// Runs and tracks delegated opencode tasks. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct Supervisor {
    shared: Arc<Shared>,
}

impl Supervisor {
    /// A supervisor with this configuration. With `config.subreaper` the process becomes a
    /// child subreaper (see [`SupervisorConfig::subreaper`]).
    pub fn new(config: SupervisorConfig) -> Supervisor {
        Supervisor {
            shared: Shared::open(config),
        }
    }

    /// How many tasks are held in memory (running and finished); the rest of
    /// [`Supervisor::list`] is answered from the registry. For tests and diagnostics.
    pub fn tasks_in_memory(&self) -> usize {
        self.shared.lock().tasks.len()
    }

    /// The registry directory in use (`None`: tasks are kept in memory only).
    pub fn state_dir(&self) -> Option<&Path> {
        self.shared.state_dir()
    }

    /// The configuration in use.
    pub fn config(&self) -> &SupervisorConfig {
        &self.shared.config
    }

    /// The installed opencode's capabilities, detected once (`--version`, `run --help`).
    pub async fn capabilities(&self) -> Result<Capabilities, String> {
        let bin = command::resolve_binary(self.shared.config.opencode_bin.as_deref())?;
        let env = self.shared.config.env.clone();
        let sandbox = self.shared.config.sandbox;
        self.shared
            .caps
            .get_or_init(|| async move { command::detect(&bin, &env, sandbox).await })
            .await
            .clone()
    }

    /// Accepts a task and starts it in the background; returns at once. Must be called
    /// inside a tokio runtime. A spec with a [`RequestKey`](crate::spec::RequestKey) already
    /// used returns that task ([`Supervisor::start_or_existing`]).
    pub fn start(&self, spec: TaskSpec) -> Result<TaskId, StartError> {
        self.start_or_existing(spec).map(|s| s.id())
    }

    /// Like [`Supervisor::start`], and says whether the task is new or the one an earlier
    /// start with the same `request_id` accepted on this state directory less than
    /// [`REQUEST_TTL`](crate::spec::REQUEST_TTL) ago (nothing is started then). The same key
    /// asking another prompt, cwd or agent is refused ([`StartError::RequestConflict`]).
    pub fn start_or_existing(&self, spec: TaskSpec) -> Result<Started, StartError> {
        if let Some(key) = &spec.request
            && let Some((task, first)) = admit::request_on_disk(&self.shared, key)
        {
            // The registry first (other bridges' and earlier bridges' tasks), off the lock;
            // this bridge's own are checked again under it, where a task is accepted.
            return admit::existing(key, task, &first);
        }
        self.start_new(spec)
    }

    /// Stage 1, admission ([`admit`]), then the task's pass ([`pass`]) in its own tokio task.
    fn start_new(&self, spec: TaskSpec) -> Result<Started, StartError> {
        let admitted = admit::check(&self.shared, &spec)?;
        // Its reservation, against every budget, before anything else is decided; released
        // below when the start is refused for another reason.
        let reservation = admit::reserve(&self.shared, &spec, &admitted.cwd)?;
        budgets::start_watch(&self.shared);
        let bin = admitted.bin.clone();
        let accepted = admit::accept(&self.shared, &spec, admitted, reservation);
        if let Ok(admit::Accepted::New { id, cwd, stop_rx }) = accepted {
            self.run(id, spec, cwd, bin, stop_rx);
            return Ok(Started::New(id));
        }
        // Refused, or an earlier start's task returned: nothing new runs on this reservation.
        budgets::release(&self.shared, reservation.0);
        accepted.map(|a| match a {
            admit::Accepted::Existing(s) => s,
            admit::Accepted::New { id, .. } => Started::New(id),
        })
    }

    /// Runs an accepted or adopted task's pass in its own tokio task.
    fn run(
        &self,
        id: TaskId,
        spec: TaskSpec,
        cwd: PathBuf,
        bin: PathBuf,
        stop_rx: watch::Receiver<Option<StopReason>>,
    ) {
        let shared = Arc::clone(&self.shared);
        tokio::spawn(pass::run_task(shared, id, spec, cwd, bin, stop_rx));
    }

    /// Adopts the registry's tasks that run as sessions on a server and whose bridge is gone
    /// ([`Owner::Resumable`]): on a remote server, or on the warm local server they ran on, left
    /// running by a bridge that stopped or died. Each is followed again from its record and its
    /// server (its output read back from the session's messages once the turn ends), as if it
    /// had never been left. A task whose remote server is no longer in the config file is
    /// recorded lost. Returns the ids adopted. Call it once the runtime runs (the bridge does
    /// when it starts serving).
    pub async fn follow_left_tasks(&self) -> Vec<TaskId> {
        let adopted = adopt::left_tasks(&self.shared).await;
        adopted
            .into_iter()
            .map(|a| {
                self.run(a.id, a.spec, a.cwd, a.bin, a.stop_rx);
                a.id
            })
            .collect()
    }

    /// Whether a task in `cwd` may start now by the budgets ([`bridge_ledger::usage::budget`]): the
    /// ledger's spend in each window plus what running tasks (of every bridge on the state
    /// directory) have used so far or reserved. What a start asks after it was accepted (its
    /// own reservation is in already).
    pub fn budget_check(&self, cwd: Option<&Path>) -> Verdict {
        budgets::check(&self.shared, cwd)
    }

    /// Where every budget that applies to a task in `cwd` stands now, and what was spent today
    /// (UTC) in all: what `opencode_policy`, the instructions and `doctor` show.
    pub fn budget_report(&self, cwd: Option<&Path>) -> (Vec<budget::Standing>, f64) {
        budgets::with_ledger(&self.shared, self.state_dir(), |rows| {
            self.budget_report_of(rows, cwd)
        })
    }

    /// [`budget_report`](Self::budget_report) over ledger rows the caller has read already.
    pub fn budget_report_of(
        &self,
        rows: &[bridge_ledger::usage::ledger::RowRef<'_>],
        cwd: Option<&Path>,
    ) -> (Vec<budget::Standing>, f64) {
        budgets::report_of(&self.shared, rows, cwd)
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
                .map(|r| r.snapshot(self.shared.config.quiet_after, version.as_deref()))
        };
        mine.or_else(|| self.stored(id).map(|t| stored_snapshot(&t, judge(&t))))
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
                .map(|(&id, r)| {
                    let snap = r.snapshot(self.shared.config.quiet_after, version.as_deref());
                    (id, snap)
                })
                .collect()
        };
        if let Some(reg) = &self.shared.registry {
            for id in reg.ids() {
                if all.contains_key(&id) {
                    continue;
                }
                if let Some(t) = self.stored(id) {
                    all.insert(id, stored_snapshot(&t, judge(&t)));
                }
            }
        }
        all.into_values().collect()
    }

    /// A task of the registry that is not in memory. A dead owner's unfinished task whose run
    /// is gone too is shown lost (ended at its last record); reading never writes: the
    /// registry records it lost when a supervisor next opens it.
    fn stored(&self, id: TaskId) -> Option<TaskRecord> {
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
        self.shared.version()
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
        let snap = r.snapshot(self.shared.config.quiet_after, version.as_deref());
        Some(output_view(snap, &r.output(), head, tail))
    }

    fn stored_result(
        &self,
        id: TaskId,
        head: Option<usize>,
        tail: Option<usize>,
    ) -> Option<TaskOutput> {
        let t = self.stored(id)?;
        let snap = stored_snapshot(&t, judge(&t));
        let o = self
            .shared
            .registry
            .as_ref()
            .and_then(|reg| reg.read_output(id))
            .unwrap_or_default();
        Some(output_view(snap, &o, head, tail))
    }

    /// Records that the caller was handed the result of a finished task of this bridge, so the
    /// Stop hook ([`crate::registry::unsettled`]) stops naming it. The tool layer calls it where
    /// a result reaches the caller (`opencode_result`, a sync start's answer, an MCP task's
    /// result), not where the bridge reads one for itself. A task of another bridge is left alone.
    pub fn mark_read(&self, id: TaskId) {
        {
            let mut inner = self.shared.lock();
            if let Some(r) = inner.tasks.get_mut(&id) {
                if r.state.is_finished() && r.rec.result_read_ms.is_none() {
                    r.rec.result_read_ms = Some(registry::now_ms());
                    persist(&self.shared, r, Save::Record);
                }
                return;
            }
        }
        // A task of this bridge that has left memory is read from (and written back to) disk.
        let (Some(reg), Some(writer)) = (&self.shared.registry, &self.shared.writer) else {
            return;
        };
        if let Some(mut t) = reg.read_task(id)
            && ProcId::from(t.owner) == self.shared.me
            && t.state().is_finished()
            && t.result_read_ms.is_none()
        {
            t.result_read_ms = Some(registry::now_ms());
            writer.write(t, None);
        }
    }

    /// Cancels a running or retrying task and waits until its processes are gone (at most
    /// the kill grace plus a moment). A finished task is reported as such.
    pub async fn cancel(&self, id: TaskId) -> CancelOutcome {
        let signal = || {
            let inner = self.shared.lock();
            match inner.tasks.get(&id) {
                None => Ok(None),
                Some(r) if r.state.is_finished() => Err(CancelOutcome::AlreadyFinished(r.state)),
                Some(r) => {
                    r.stop.send_replace(Some(StopReason::Cancel));
                    Ok(Some(r.done.subscribe()))
                }
            }
        };
        let mut done = match signal() {
            Ok(d) => d,
            Err(outcome) => return outcome,
        };
        // A task left on a server by a bridge that is gone, not adopted yet (the bridge adopts
        // such tasks as it starts, and a cancel can come first): adopted now, then cancelled
        // like any of this bridge's tasks, so its turn is aborted.
        if done.is_none()
            && self
                .stored(id)
                .is_some_and(|t| judge(&t) == Owner::Resumable)
        {
            self.follow_left_tasks().await;
            done = match signal() {
                Ok(d) => d,
                Err(outcome) => return outcome,
            };
        }
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
            Owner::Finished | Owner::Lost | Owner::Resumable => {
                return CancelOutcome::AlreadyFinished(t.state());
            }
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
        let deadline = bridge_proc::deadline::after_tokio(timeout);
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

    /// The bridge's clean stop: refuses new tasks and, by [`SupervisorConfig::on_exit`], leaves
    /// every unfinished task running (recorded so, for the next bridge to adopt: a run's process
    /// goes on in its own group, a served task's turn on its server) or cancels it (process
    /// groups killed, turns aborted, everything reaped). Each warm local server stays while it
    /// has work and stops otherwise. Returns when every task is recorded.
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
        self.shared.serve_pool.exit().await;
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
                backend(r.runner).traits().learns_session_from_store
                    && r.summary.session_id().is_none()
                    && r.rec.continues.is_none()
                    && r.finished
                        .is_none_or(|f| now.saturating_duration_since(f) < LEARN_AFTER_FINISH)
            })
            .filter_map(|(&id, r)| {
                Some(Sessionless {
                    id,
                    title: r.rec.title.clone(),
                    cwd: r.rec.cwd.clone(),
                    attempt_started: r.attempt_wall()?,
                })
            })
            .collect()
    }

    /// Records `session_id` as the session of task `id`, learnt from opencode's store before
    /// the run's event stream named it (opencode prints the session id only with its first
    /// event). Taken only while the task has no session id, is an opencode task and the session
    /// was created (`created`) no earlier than the task's current attempt started. Returns once
    /// the registry holds it (a snapshot shows a session id only then, see
    /// `Record::durable_session`), or after a second at most, so that the call that learnt it
    /// shows it. True when recorded.
    pub async fn learn_session(&self, id: TaskId, session_id: &str, created: SystemTime) -> bool {
        let written = {
            let mut inner = self.shared.lock();
            let Some(r) = inner.tasks.get_mut(&id) else {
                return false;
            };
            let fits = backend(r.runner).traits().learns_session_from_store
                && r.summary.session_id().is_none()
                && r.rec.continues.is_none()
                && r.attempt_wall().is_some_and(|start| created >= start);
            if !fits {
                return false;
            }
            r.summary.learn_session_id(session_id);
            r.persisted_session = true;
            let version = self.shared.version();
            self.shared
                .writer
                .as_ref()
                .map(|w| w.write_acked(r.record(r.state, version.as_deref()), None))
        };
        if let Some(ack) = written {
            let _ = tokio::time::timeout(Duration::from_secs(1), ack).await;
        }
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
                    agent: &r.rec.agent,
                    title: &r.rec.title,
                    model: r.rec.model.as_deref(),
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
        // The warm servers of the state directory (this bridge's, adopted, left by others),
        // with the tasks running on each and their idle time (found by pid when the scan did
        // not know the binary's name).
        let warm = self.shared.serve_pool.views();
        if let Some(program) = program.as_deref() {
            for w in &warm {
                if !table.iter().any(|p| p.pid == w.pid as i32)
                    && let Some(entry) = proctable::own_run_entry(w.pid as i32, program)
                {
                    table.push(entry);
                }
            }
        }
        let elsewhere: Vec<(u32, TaskId)> = match &self.shared.registry {
            Some(reg) if warm.iter().any(|w| !w.held) => reg
                .ids()
                .into_iter()
                .filter(|id| !inner.tasks.contains_key(id))
                .filter_map(|id| reg.read_task(id))
                .filter(|t| !t.state().is_finished())
                .filter_map(|t| Some((t.server?.pid as u32, t.id)))
                .collect(),
            _ => Vec::new(),
        };
        for p in table.iter_mut() {
            let Some(w) = warm.iter().find(|w| w.pid as i32 == p.pid) else {
                continue;
            };
            let mut on_it: Vec<TaskId> = inner
                .tasks
                .iter()
                .filter(|(_, r)| {
                    !r.state.is_finished()
                        && (r.server_pid == Some(w.pid)
                            || r.rec.server.is_some_and(|s| s.pid as u32 == w.pid))
                })
                .map(|(&id, _)| id)
                .chain(
                    elsewhere
                        .iter()
                        .filter(|(pid, _)| *pid == w.pid)
                        .map(|(_, id)| *id),
                )
                .collect();
            on_it.sort_unstable();
            on_it.dedup();
            p.bridge_server = Some(proctable::WarmServer {
                idle: if on_it.is_empty() {
                    w.idle
                } else {
                    Duration::ZERO
                },
                tasks: on_it,
                held: w.held,
            });
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
