//! The supervisor: the task table and the public API that answers callers (the dispatcher).
//! One attempt of a task (spawn, watch, stop) is [`child`]'s; the retry policy and a task's end
//! are [`attempt`]'s; a run's stdout and stderr are followed by [`output`]; a task in memory and
//! the one way any task becomes a snapshot are in [`record`].
//!
//! Each task runs in its own tokio task (works on a current-thread runtime). Stopping (cancel,
//! timeout, overflow loop, shutdown) goes through `bridge_proc::terminate_tree`: SIGTERM to the
//! group and every known descendant, a grace period, SIGKILL, then reaping.
//!
//! No file is written while the table is locked: records go to the registry's writer thread
//! over a channel ([`persist`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{OnceCell, watch};

use crate::StartError;
use crate::command::{self, Capabilities};
use crate::proctable::{self, OpencodeProcess};
use crate::registry::{self, Owner, Registry, TaskRecord, judge, settle_lost};
use crate::runner::Runner;
use crate::runner::serve::Place;
use crate::runner::{OwnRun, backend};
use crate::spec::{SupervisorConfig, TaskSpec};
use crate::task::{
    CancelOutcome, Sessionless, TaskId, TaskOutput, TaskSnapshot, TaskState, WaitReport,
};
use crate::usage::budget::{self, Verdict};
use crate::usage::reserve;
use bridge_proc::{self as procs, ProcId};

mod attempt;
mod audited;
mod child;
mod isolated;
mod output;
mod record;
mod served;
mod verify;

use record::{Record, Save, output_view, stored_snapshot};

/// Finished tasks kept in the table; older finished ones are forgotten first.
pub const MAX_FINISHED_TASKS: usize = 200;

/// Finished tasks whose record and output are safely in the registry stay in memory only this
/// many (the newest); older ones are answered from the registry like after a restart, so a
/// long-lived bridge does not hold every finished task's text (up to the output cap each).
pub const FINISHED_IN_MEMORY: usize = 16;

/// How long after its end a task without a session id is still matched against the store.
pub const LEARN_AFTER_FINISH: Duration = Duration::from_secs(60);

/// Why a task is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Cancel,
    Shutdown,
    /// A budget window it counts against is spent (the message is the record's
    /// `budget_stop`).
    Budget,
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
    /// This process (the owner written in its tasks' records).
    me: ProcId,
    inner: Mutex<Inner>,
    caps: OnceCell<Result<Capabilities, String>>,
    registry: Option<Registry>,
    /// Writes this supervisor's records to `registry` on its own thread.
    writer: Option<registry::Writer>,
    /// The warm local servers of served tasks ([`crate::runner::serve::pool`]).
    serve_pool: Arc<crate::runner::serve::pool::Pool>,
    /// The budgets' watcher ([`watch_budgets`]) runs.
    watching: std::sync::atomic::AtomicBool,
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
            let (pruned, lost) = reg.reconcile(config.prune_after);
            if pruned > 0 || lost > 0 {
                tracing::info!(pruned, lost, "registry swept");
            }
            if let Some(dir) = config.state_dir.as_deref() {
                // Isolated tasks' worktrees neither applied nor discarded go at the same age.
                let done = |id| reg.read_task(id).is_none_or(|t| t.state().is_finished());
                let gone = crate::worktree::prune(dir, config.prune_after, done);
                if gone > 0 {
                    tracing::info!(worktrees = gone, "isolated tasks' worktrees pruned");
                }
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
            let me = registry.as_ref().map(|reg| reg.me).unwrap_or_else(|| {
                let pid = std::process::id() as i32;
                ProcId::of(pid).unwrap_or(ProcId { pid, start_time: 0 })
            });
            // Warm servers are noted beside the registry; those left idle with no bridge
            // attached are held to the idle rule (off the start path: a stop may wait its grace).
            let serve_pool = match config.state_dir.as_deref() {
                Some(dir) => {
                    let notes = dir.join("serve");
                    let sweep = notes.clone();
                    let (idle, timeout) = (config.serve_idle, config.api_timeout);
                    // Most starts find nothing noted: no thread for them.
                    if std::fs::read_dir(&notes).is_ok_and(|mut d| d.next().is_some()) {
                        let _ = std::thread::Builder::new()
                            .name("serve-sweep".into())
                            .spawn(move || {
                                let stopped =
                                    crate::runner::serve::pool::sweep_notes(&sweep, idle, timeout);
                                if stopped > 0 {
                                    tracing::info!(
                                        stopped,
                                        "idle warm servers no bridge held were stopped"
                                    );
                                }
                            });
                    }
                    Arc::new(crate::runner::serve::pool::Pool::noting_in(
                        notes,
                        me,
                        config.serve_watcher.clone(),
                        (config.api_timeout, config.serve_idle),
                    ))
                }
                None => Arc::default(),
            };
            Shared {
                config,
                me,
                inner: Mutex::new(Inner {
                    next_id: 1,
                    ..Inner::default()
                }),
                caps: OnceCell::new(),
                registry,
                writer,
                serve_pool,
                watching: std::sync::atomic::AtomicBool::new(false),
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
            && let Some((task, first)) = self.request_on_disk(key)
        {
            // The registry first (other bridges' and earlier bridges' tasks), off the lock;
            // this bridge's own are checked again under it, where a task is accepted.
            return existing(key, task, &first);
        }
        self.start_new(spec)
    }

    /// The task of the registry that `key`'s id started, with what it asked (the newest).
    fn request_on_disk(
        &self,
        key: &crate::spec::RequestKey,
    ) -> Option<(TaskId, crate::spec::RequestKey)> {
        let reg = self.shared.registry.as_ref()?;
        let mut ids = reg.ids();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.into_iter()
            .filter_map(|id| reg.read_task(id))
            .filter(request_fresh)
            .find_map(|t| {
                let k = t.request.filter(|k| k.id == key.id)?;
                Some((t.id, k))
            })
    }

    fn start_new(&self, spec: TaskSpec) -> Result<Started, StartError> {
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
        spec.check_option_like(spec.model.as_deref().or(cfg.default_model.as_deref()))
            .map_err(StartError::InvalidSpec)?;
        let cwd = command::check_cwd(&spec.cwd, &cfg.root)?;
        if cfg.sandbox == bridge_fence::Sandbox::Required
            && let Err(why) = bridge_fence::kernel_abi()
        {
            // The same refusal every attempt would meet, before anything is accepted.
            return Err(StartError::Unconfinable(
                bridge_fence::Fence::prepare(&bridge_fence::Plan::new(), cfg.sandbox)
                    .err()
                    .unwrap_or(why),
            ));
        }
        let isolated = isolated::start_check(&spec, &cwd, self.state_dir())?;
        if spec.verify_retries > crate::verify::MAX_VERIFY_RETRIES {
            return Err(StartError::InvalidSpec(format!(
                "verify_retries is {}, more than {}: give 0 to {}",
                spec.verify_retries,
                crate::verify::MAX_VERIFY_RETRIES,
                crate::verify::MAX_VERIFY_RETRIES
            )));
        }
        if let Some(schema) = &spec.output_schema {
            crate::verify::compile_schema(schema).map_err(StartError::InvalidSpec)?;
        }
        let model = spec.model.clone().or_else(|| cfg.default_model.clone());
        let runner = Runner::for_model(model.as_deref());
        let place = self.place_of(&spec, runner, isolated.is_some())?;
        if let (Some(_), Some(Place::Remote(name))) = (&spec.verify, &place) {
            return Err(StartError::InvalidSpec(format!(
                "verify runs its command on this machine, but the task would work on server {name}'s tree: drop `verify`, or run the task here (no `server`)"
            )));
        }
        let account = backend(runner).account_key(model.as_deref());
        let bin = match backend(runner).binary(cfg) {
            Ok(b) => b,
            // A task on a remote server needs no opencode here.
            Err(_) if matches!(place, Some(Place::Remote(_))) => PathBuf::new(),
            Err(e) => return Err(StartError::BinaryMissing(e)),
        };
        // Its reservation, against every budget, before anything else is decided; released
        // below when the start is refused for another reason.
        let reservation = self.reserve(&spec, &cwd)?;
        if !self
            .shared
            .watching
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tokio::spawn(watch_budgets(Arc::downgrade(&self.shared)));
        }
        let accepted = self.accept(
            spec,
            cwd,
            isolated,
            model,
            runner,
            place,
            account,
            bin,
            reservation,
        );
        // Refused, or an earlier start's task returned: nothing new runs on this reservation.
        if !matches!(accepted, Ok(Started::New(_))) {
            self.release(reservation.0);
        }
        accepted
    }

    /// The table part of [`Supervisor::start`]: what is decided under the task table's lock.
    #[allow(clippy::too_many_arguments)]
    fn accept(
        &self,
        spec: TaskSpec,
        cwd: PathBuf,
        isolated: Option<crate::worktree::Checked>,
        model: Option<String>,
        runner: Runner,
        place: Option<Place>,
        account: String,
        bin: PathBuf,
        reservation: (Option<u64>, f64),
    ) -> Result<Started, StartError> {
        let cfg = &self.shared.config;
        let (stop_tx, stop_rx) = watch::channel(None);
        let id = {
            let mut inner = self.shared.lock();
            if inner.shutting_down {
                return Err(StartError::ShuttingDown);
            }
            if let Some(key) = &spec.request
                && let Some((task, first)) = inner
                    .tasks
                    .values()
                    .filter(|r| request_fresh(&r.rec))
                    .find_map(|r| {
                        Some((r.rec.id, r.rec.request.clone().filter(|k| k.id == key.id)?))
                    })
            {
                return existing(key, task, &first);
            }
            if let Some(&until) = inner.quota_until.get(&account)
                && until > SystemTime::now()
            {
                return Err(StartError::QuotaWindow {
                    account,
                    until: crate::utc::format(until),
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
            if let Some(session) = spec
                .session
                .as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                && let Some((&task, _)) = inner.tasks.iter().find(|(_, r)| {
                    !r.state.is_finished()
                        && (r.summary.session_id().as_deref() == Some(session)
                            || r.rec.session_id.as_deref() == Some(session))
                })
            {
                return Err(StartError::SessionInUse {
                    session: session.to_owned(),
                    task,
                });
            }
            if let Some(Place::Remote(name)) = &place
                && let Some(limit) = cfg
                    .servers
                    .iter()
                    .find(|s| &s.name == name)
                    .and_then(|s| s.max_parallel)
            {
                let engine = Place::Remote(name.clone()).engine_name();
                let on_it = inner
                    .tasks
                    .values()
                    .filter(|r| {
                        !r.state.is_finished() && r.rec.engine.as_deref() == Some(engine.as_str())
                    })
                    .count();
                if on_it >= limit as usize {
                    return Err(StartError::ServerBusy {
                        server: name.clone(),
                        running: on_it,
                        limit: limit as usize,
                    });
                }
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
            // An isolated task works in its worktree (made before the first attempt).
            let cwd = isolated.map_or(cwd, |c| c.for_task(id).run_cwd());
            let mut rec = TaskRecord::accepted(id, self.shared.me, &spec.agent, &spec.title, &cwd);
            rec.model = model.clone();
            rec.read_only = spec.read_only;
            rec.label = spec.label.clone().filter(|l| !l.trim().is_empty());
            rec.continues = spec.session.clone().filter(|s| !s.trim().is_empty());
            rec.engine = place.as_ref().map(Place::engine_name);
            rec.client_session = cfg.client_session.clone();
            rec.request = spec.request.clone();
            rec.checks = (spec.verify.is_some() || spec.output_schema.is_some()).then(|| {
                crate::registry::StoredChecks {
                    verify: spec.verify.clone(),
                    verify_retries: spec.verify_retries,
                    output_schema: spec.output_schema.clone(),
                }
            });
            rec.max_cost_usd = spec.max_cost_usd;
            let durable_session = self.shared.writer.is_none();
            let r = Record::new(
                rec,
                runner,
                cfg.output_cap,
                stop_tx,
                durable_session,
                cfg.pricing.clone(),
            );
            let mut r = r;
            r.reserved = reservation;
            inner.tasks.insert(id, r);
            if let Some(r) = inner.tasks.get(&id) {
                persist(&self.shared, r, Save::Record);
            }
            (id, cwd)
        };
        let (id, cwd) = id;
        let shared = Arc::clone(&self.shared);
        tokio::spawn(attempt::run_task(shared, id, spec, cwd, bin, stop_rx));
        Ok(Started::New(id))
    }

    /// Adopts the registry's tasks that run as sessions on a server and whose bridge is gone
    /// ([`Owner::Resumable`]): on a remote server, or on the warm local server they ran on, left
    /// running by a bridge that stopped or died. Each is followed again from its record and its
    /// server (its output read back from the session's messages once the turn ends), as if it
    /// had never been left. A task whose remote server is no longer in the config file is
    /// recorded lost. Returns the ids adopted. Call it once the runtime runs (the bridge does
    /// when it starts serving).
    pub async fn follow_left_tasks(&self) -> Vec<TaskId> {
        let Some(reg) = self.shared.registry.clone() else {
            return Vec::new();
        };
        let found: Vec<TaskRecord> = tokio::task::spawn_blocking(move || {
            reg.ids()
                .into_iter()
                .filter_map(|id| reg.read_task(id))
                .filter(|t| judge(t) == Owner::Resumable)
                .collect()
        })
        .await
        .unwrap_or_default();
        let mut adopted = Vec::new();
        for mut t in found {
            let place = t.engine.as_deref().and_then(Place::of_engine_name);
            let known = match &place {
                Some(Place::Remote(name)) => {
                    self.shared.config.servers.iter().any(|s| &s.name == name)
                }
                Some(Place::Local) => true,
                None => false,
            };
            if !known {
                settle_lost(&mut t, registry::now_ms());
                if let Some(reg) = &self.shared.registry {
                    reg.write_task(&t);
                }
                continue;
            }
            let (server, bin) = match place {
                Some(Place::Remote(server)) => (Some(server), PathBuf::new()),
                _ => {
                    let runner = Runner::for_model(t.model.as_deref());
                    match backend(runner).binary(&self.shared.config) {
                        Ok(bin) => (None, bin),
                        Err(_) => continue,
                    }
                }
            };
            let id = t.id;
            let mut spec = TaskSpec::new("", &t.cwd, &t.agent, &t.title);
            spec.read_only = t.read_only;
            spec.auto_approve = !t.read_only;
            spec.model = t.model.clone();
            spec.session = t.session_id.clone();
            spec.label = t.label.clone();
            spec.server = server;
            // Its checks run when the turn ends, as they would have on the first bridge.
            if let Some(c) = &t.checks {
                spec.verify = c.verify.clone();
                spec.verify_retries = c.verify_retries;
                spec.output_schema = c.output_schema.clone();
            }
            // And its cost cap holds as it did there.
            spec.max_cost_usd = t.max_cost_usd;
            let (stop_tx, stop_rx) = watch::channel(None);
            // It runs already, so it is never refused; but it holds a reservation again, so
            // that spend plus reservations stays honest for every bridge on the state directory.
            let reservation = self.reserve_adopted(&t.cwd, t.max_cost_usd);
            {
                let mut inner = self.shared.lock();
                if inner.tasks.contains_key(&id) || inner.shutting_down {
                    drop(inner);
                    self.release(reservation.0);
                    continue;
                }
                t.owner = self.shared.me.into();
                let mut r = Record::new(
                    t.clone(),
                    Runner::for_model(t.model.as_deref()),
                    self.shared.config.output_cap,
                    stop_tx,
                    true,
                    self.shared.config.pricing.clone(),
                );
                r.resume = true;
                r.state = TaskState::Running;
                r.reserved = reservation;
                inner.tasks.insert(id, r);
                if let Some(r) = inner.tasks.get(&id) {
                    persist(&self.shared, r, Save::Record);
                }
            }
            let shared = Arc::clone(&self.shared);
            tokio::spawn(attempt::run_task(
                shared,
                id,
                spec,
                t.cwd.clone(),
                bin,
                stop_rx,
            ));
            adopted.push(id);
        }
        adopted
    }

    /// Where a task runs: `None` for a run of its runner, else the server (the one it names,
    /// or the local warm one when the serve engine is configured for opencode tasks).
    fn place_of(
        &self,
        spec: &TaskSpec,
        runner: Runner,
        isolated: bool,
    ) -> Result<Option<Place>, StartError> {
        let cfg = &self.shared.config;
        let named = spec
            .server
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        match named {
            Some("local") => {}
            Some(name) => {
                if !cfg.servers.iter().any(|s| s.name == name) {
                    let known: Vec<&str> = cfg.servers.iter().map(|s| s.name.as_str()).collect();
                    return Err(StartError::InvalidSpec(format!(
                        "no server is named {name:?}: {} (servers are named in the bridge's config file)",
                        if known.is_empty() {
                            "the config file names none".to_owned()
                        } else {
                            format!("use one of {}, or local", known.join(", "))
                        }
                    )));
                }
                if !backend(runner).traits().serves {
                    return Err(StartError::InvalidSpec(format!(
                        "server {name:?} runs opencode, and this task's model is a Claude model: give an opencode model, or no server"
                    )));
                }
                if isolated {
                    return Err(StartError::InvalidSpec(format!(
                        "isolation makes a git worktree on this machine, which server {name:?} cannot see: drop isolation, or run without a server"
                    )));
                }
                return Ok(Some(Place::Remote(name.to_owned())));
            }
            None => {}
        }
        Ok(
            (backend(runner).traits().serves && cfg.engine == crate::Engine::Serve)
                .then_some(Place::Local),
        )
    }

    /// Whether a task in `cwd` may start now by the budgets ([`crate::usage::budget`]): the
    /// ledger's spend in each window plus what running tasks (of every bridge on the state
    /// directory) have used so far or reserved. What a start asks after it was accepted (its
    /// own reservation is in already).
    pub fn budget_check(&self, cwd: Option<&Path>) -> Verdict {
        let cfg = &self.shared.config;
        if cfg.budgets.is_empty() && cfg.project_budgets.is_empty() {
            return Verdict::Allow(Vec::new());
        }
        let held = self.held_now();
        self.with_ledger(|rows| {
            budget::verdict(
                budget::standings(
                    rows,
                    &cfg.budgets,
                    &cfg.project_budgets,
                    cwd,
                    &held,
                    crate::registry::now_ms(),
                ),
                0.0,
            )
        })
    }

    /// Where every budget that applies to a task in `cwd` stands now, and what was spent today
    /// (UTC) in all: what `opencode_policy`, the instructions and `doctor` show.
    pub fn budget_report(&self, cwd: Option<&Path>) -> (Vec<budget::Standing>, f64) {
        self.with_ledger(|rows| self.budget_report_of(rows, cwd))
    }

    /// `f` of the ledger's rows (none without a state directory or ledger).
    fn with_ledger<R>(&self, f: impl FnOnce(&[crate::usage::ledger::RowRef<'_>]) -> R) -> R {
        let text = self
            .state_dir()
            .and_then(|d| crate::usage::ledger::read_text(d).ok())
            .unwrap_or_default();
        let (rows, _) = crate::usage::ledger::parse_text(&text);
        let rows: Vec<_> = rows
            .iter()
            .map(crate::usage::ledger::TextRow::view)
            .collect();
        f(&rows)
    }

    /// [`budget_report`](Self::budget_report) over ledger rows the caller has read already.
    pub fn budget_report_of(
        &self,
        rows: &[crate::usage::ledger::RowRef<'_>],
        cwd: Option<&Path>,
    ) -> (Vec<budget::Standing>, f64) {
        let now = crate::registry::now_ms();
        let running = self.held_now();
        let cfg = &self.shared.config;
        let standings =
            budget::standings(rows, &cfg.budgets, &cfg.project_budgets, cwd, &running, now);
        let today = budget::standings(
            rows,
            &budget::Budgets {
                day_usd: Some(f64::INFINITY),
                month_usd: None,
            },
            &[],
            None,
            &running,
            now,
        )
        .first()
        .map_or(0.0, |s| s.spent);
        (standings, today)
    }

    /// Every running task as the budgets count it: this supervisor's from memory, the other
    /// bridges' from the reservations file.
    fn held_now(&self) -> Vec<budget::Held> {
        let list = self
            .state_dir()
            .and_then(|d| reserve::read(d).ok())
            .unwrap_or_default();
        self.held_with(&list)
    }

    /// [`held_now`](Self::held_now) with the reservations file's entries `list`: this
    /// supervisor's tasks from memory (their use is newer there), every other entry from the
    /// file (another bridge's, or one of this supervisor's not in its table yet).
    fn held_with(&self, list: &[reserve::Reservation]) -> Vec<budget::Held> {
        let own = own_held(&self.shared.lock());
        let keys: BTreeSet<u64> = own.iter().filter_map(|(k, _)| *k).collect();
        let me = self.shared.me;
        list.iter()
            .filter(|r| !(r.owner() == me && keys.contains(&r.key)))
            .map(|r| budget::Held {
                project: r.project.clone(),
                used: r.used_usd,
                reserved: r.amount_usd,
            })
            .chain(own.into_iter().map(|(_, h)| h))
            .collect()
    }

    /// A start's reservation ([`crate::usage::reserve`]), made only when the budgets let it
    /// start: its `max_cost_usd`, or the default from the ledger. With a state directory the
    /// check and the reservation happen under the reservations file's lock, so starts of every
    /// bridge on it are decided one after another. Returns the reservation's key (`None`:
    /// no state directory, the table holds it) and amount.
    fn reserve(&self, spec: &TaskSpec, cwd: &Path) -> Result<(Option<u64>, f64), StartError> {
        let cfg = &self.shared.config;
        let now = crate::registry::now_ms();
        let limited = !(cfg.budgets.is_empty() && cfg.project_budgets.is_empty());
        let decide = |rows: &[crate::usage::ledger::RowRef<'_>],
                      held: &[budget::Held]|
         -> Result<f64, StartError> {
            let amount = spec
                .max_cost_usd
                .unwrap_or_else(|| reserve::default_amount(rows, now));
            if limited
                && let Verdict::Refuse(s) = budget::verdict(
                    budget::standings(
                        rows,
                        &cfg.budgets,
                        &cfg.project_budgets,
                        Some(cwd),
                        held,
                        now,
                    ),
                    amount,
                )
            {
                return Err(over_budget(&s, amount, spec.max_cost_usd.is_some()));
            }
            Ok(amount)
        };
        let Some(dir) = self.state_dir().map(Path::to_path_buf) else {
            let held: Vec<budget::Held> = own_held(&self.shared.lock())
                .into_iter()
                .map(|(_, h)| h)
                .collect();
            return decide(&[], &held).map(|a| (None, a));
        };
        let key = NEXT_RESERVATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = self.shared.me;
        let made = reserve::update(&dir, |list| {
            let text = crate::usage::ledger::read_text(&dir).unwrap_or_default();
            let (rows, _) = crate::usage::ledger::parse_text(&text);
            let rows: Vec<_> = rows
                .iter()
                .map(crate::usage::ledger::TextRow::view)
                .collect();
            let amount = decide(&rows, &self.held_with(list))?;
            list.push(reserve::Reservation {
                pid: me.pid,
                start_time: me.start_time,
                key,
                project: cwd.to_path_buf(),
                amount_usd: amount,
                used_usd: 0.0,
                at_ms: now,
            });
            Ok(amount)
        });
        match made {
            Ok(amount) => amount.map(|a| (Some(key), a)),
            Err(e) => Err(StartError::Registry(format!(
                "the budgets' reservations file {} could not be written ({e}): check that the state directory is writable",
                reserve::path(&dir).display()
            ))),
        }
    }

    /// The reservation of a task adopted from a bridge that is gone (whose reservation went
    /// with it): its `max_cost_usd` when it had one, else the default amount from the ledger
    /// ([`reserve::default_amount`]), made without
    /// a budget check (the task runs already). Its key is `None` without a state directory or
    /// when the file cannot be written (the table still counts the amount).
    fn reserve_adopted(&self, cwd: &Path, cap: Option<f64>) -> (Option<u64>, f64) {
        let now = crate::registry::now_ms();
        let Some(dir) = self.state_dir().map(Path::to_path_buf) else {
            return (None, reserve::DEFAULT_FLOOR_USD);
        };
        let key = NEXT_RESERVATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = self.shared.me;
        let made = reserve::update(&dir, |list| {
            let text = crate::usage::ledger::read_text(&dir).unwrap_or_default();
            let (rows, _) = crate::usage::ledger::parse_text(&text);
            let rows: Vec<_> = rows
                .iter()
                .map(crate::usage::ledger::TextRow::view)
                .collect();
            let amount = cap.unwrap_or_else(|| reserve::default_amount(&rows, now));
            list.push(reserve::Reservation {
                pid: me.pid,
                start_time: me.start_time,
                key,
                project: cwd.to_path_buf(),
                amount_usd: amount,
                used_usd: 0.0,
                at_ms: now,
            });
            amount
        });
        match made {
            Ok(amount) => (Some(key), amount),
            Err(e) => {
                tracing::warn!("an adopted task's budget reservation could not be written ({e})");
                (None, reserve::DEFAULT_FLOOR_USD)
            }
        }
    }

    /// Releases a reservation this supervisor made (`None`: nothing to release).
    fn release(&self, key: Option<u64>) {
        release_in(self.state_dir().map(Path::to_path_buf), self.shared.me, key);
    }

    /// Once a second while tasks run: writes what this supervisor's running tasks have used
    /// to their reservations (for the other bridges), and stops each running task a spent
    /// budget window covers (kind `budget`).
    fn budget_tick(&self) {
        let own = own_held(&self.shared.lock());
        if own.is_empty() {
            return;
        }
        let me = self.shared.me;
        let list = match self.state_dir() {
            Some(dir) => {
                let used: BTreeMap<u64, f64> = own
                    .iter()
                    .filter_map(|(k, h)| k.map(|k| (k, h.used)))
                    .collect();
                reserve::update(dir, |l| {
                    for r in l.iter_mut().filter(|r| r.owner() == me) {
                        if let Some(u) = used.get(&r.key) {
                            r.used_usd = *u;
                        }
                    }
                    l.clone()
                })
                .unwrap_or_default()
            }
            None => Vec::new(),
        };
        let cfg = &self.shared.config;
        if cfg.budgets.is_empty() && cfg.project_budgets.is_empty() {
            return;
        }
        let held = self.held_with(&list);
        let now = crate::registry::now_ms();
        let spent: Vec<(PathBuf, budget::Standing)> = self.with_ledger(|rows| {
            let cwds: BTreeSet<PathBuf> = own.iter().map(|(_, h)| h.project.clone()).collect();
            cwds.into_iter()
                .filter_map(|cwd| {
                    budget::standings(
                        rows,
                        &cfg.budgets,
                        &cfg.project_budgets,
                        Some(&cwd),
                        &held,
                        now,
                    )
                    .into_iter()
                    .find(budget::Standing::exhausted)
                    .map(|s| (cwd, s))
                })
                .collect()
        });
        if spent.is_empty() {
            return;
        }
        let mut inner = self.shared.lock();
        for r in inner.tasks.values_mut() {
            if *r.done.borrow() || r.stop.borrow().is_some() {
                continue;
            }
            if let Some((_, s)) = spent.iter().find(|(cwd, _)| *cwd == r.rec.cwd) {
                r.budget_stop = Some(format!(
                    "stopped because the {} is spent: ${:.4} of ${:.2} used by finished and running tasks; it resets at {}",
                    budget_name(s),
                    s.spent,
                    s.budget,
                    crate::utc::format(crate::registry::from_ms(s.resets_ms))
                ));
                r.stop.send_replace(Some(StopReason::Budget));
            }
        }
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

/// What [`Supervisor::start_or_existing`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// A new task was accepted.
    New(TaskId),
    /// The task an earlier start with the same `request_id` accepted; nothing was started.
    Existing(TaskId),
}

impl Started {
    /// The task's id.
    pub fn id(self) -> TaskId {
        match self {
            Started::New(id) | Started::Existing(id) => id,
        }
    }
}

/// What a start with `key` gets when `task` was started with `first`: that task, or the
/// refusal naming what differs.
fn existing(
    key: &crate::spec::RequestKey,
    task: TaskId,
    first: &crate::spec::RequestKey,
) -> Result<Started, StartError> {
    match key.differs_from(first) {
        Some(what) => Err(StartError::RequestConflict {
            request_id: key.id.clone(),
            task,
            what,
        }),
        None => Ok(Started::Existing(task)),
    }
}

/// True while a task's `request_id` still names it ([`crate::spec::REQUEST_TTL`]).
fn request_fresh(t: &TaskRecord) -> bool {
    let ttl = crate::spec::REQUEST_TTL.as_millis() as u64;
    t.request.is_some() && crate::registry::now_ms().saturating_sub(t.accepted_ms) < ttl
}

/// Keys of reservations, unique in this process (several supervisors may share it in tests).
static NEXT_RESERVATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// This supervisor's running tasks as the budgets count them, with their reservation's key.
fn own_held(inner: &Inner) -> Vec<(Option<u64>, budget::Held)> {
    inner
        .tasks
        .values()
        .filter(|r| !*r.done.borrow())
        .map(|r| {
            (
                r.reserved.0,
                budget::Held {
                    project: r.rec.cwd.clone(),
                    used: r.task_usage().budget_cost(),
                    reserved: r.reserved.1,
                },
            )
        })
        .collect()
}

/// Drops reservation `key` of owner `me` from the file under `dir`.
fn release_in(dir: Option<PathBuf>, me: ProcId, key: Option<u64>) {
    if let (Some(dir), Some(key)) = (dir, key)
        && let Err(e) = reserve::update(&dir, |l| l.retain(|r| !(r.owner() == me && r.key == key)))
    {
        tracing::warn!(
            "a budget reservation could not be released ({e}); it expires with this bridge"
        );
    }
}

/// Releases task `id`'s reservation (once its spend is on the ledger).
async fn release_reservation(shared: &Shared, id: TaskId) {
    let Some(key) = shared.with(id, |r| r.reserved.0.take()).flatten() else {
        return;
    };
    let dir = shared
        .registry
        .as_ref()
        .and(shared.config.state_dir.clone());
    let me = shared.me;
    let _ = tokio::task::spawn_blocking(move || release_in(dir, me, Some(key))).await;
}

/// Runs [`Supervisor::budget_tick`] once a second until the supervisor is dropped.
async fn watch_budgets(weak: std::sync::Weak<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let sup = Supervisor { shared };
        let _ = tokio::task::spawn_blocking(move || sup.budget_tick()).await;
    }
}

/// `day budget` or `month budget of project /p`.
fn budget_name(s: &budget::Standing) -> String {
    match &s.project {
        Some(p) => format!("{} budget of project {}", s.window.as_str(), p.display()),
        None => format!("{} budget", s.window.as_str()),
    }
}

/// The refusal of a start by a budget: spent, or passed by what the start would reserve
/// (`amount`, its `max_cost_usd` when `capped`).
fn over_budget(s: &budget::Standing, amount: f64, capped: bool) -> StartError {
    let variable = match s.project {
        Some(_) => s.variable().to_owned(),
        None => format!("{} or the config file's [budget]", s.variable()),
    };
    StartError::OverBudget(Box::new(budget::Refusal {
        what: budget_name(s),
        how: if s.exhausted() {
            "is spent"
        } else {
            "would be passed"
        },
        variable,
        spent: s.spent,
        reserved: s.reserved,
        budget: s.budget,
        reserve: amount,
        reserve_why: if capped {
            "its max_cost_usd".to_owned()
        } else {
            format!(
                "the default without max_cost_usd: the costliest task of the last {} days, at least ${:.2}",
                reserve::DEFAULT_LOOKBACK_DAYS,
                reserve::DEFAULT_FLOOR_USD
            )
        },
        resets: crate::utc::format(crate::registry::from_ms(s.resets_ms)),
    }))
}

pub(super) async fn wait_done(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}
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
/// Hands a task of this supervisor to the registry's writer (its output too with
/// [`Save::WithOutput`]). Called with the table locked, so the records of one task are queued
/// in the order they were made; serialising and writing happen on the writer's thread.
fn persist(shared: &Shared, r: &Record, save: Save) {
    if let Some(writer) = &shared.writer {
        let output = (save == Save::WithOutput).then(|| r.output());
        writer.write(r.record(r.state, shared.version().as_deref()), output);
    }
}

impl Shared {
    /// The opencode version in use, once detected.
    fn version(&self) -> Option<String> {
        self.caps
            .get()
            .and_then(|c| c.as_ref().ok())
            .map(|c| c.version.clone())
    }
}
