//! The task table: the state every part of a task's pass shares ([`Shared`]), how it is opened
//! (registry swept, warm servers' notes), and the one way a task's record reaches the registry
//! ([`persist`]). No file is written while the table is locked: records go to the registry's
//! writer thread over a channel.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::{OnceCell, watch};

use super::record::{Record, Save};
use crate::command::Capabilities;
use crate::registry::{self, Registry};
use crate::spec::SupervisorConfig;
use crate::task::TaskId;
use bridge_proc::{self as procs, ProcId};

/// Finished tasks kept in the table; older finished ones are forgotten first.
pub const MAX_FINISHED_TASKS: usize = 200;

/// Finished tasks whose record and output are safely in the registry stay in memory only this
/// many (the newest); older ones are answered from the registry like after a restart, so a
/// long-lived bridge does not hold every finished task's text (up to the output cap each).
pub const FINISHED_IN_MEMORY: usize = 16;

/// How long after its end a task without a session id is still matched against the store.
pub const LEARN_AFTER_FINISH: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
pub(super) struct Inner {
    pub(super) tasks: BTreeMap<TaskId, Record>,
    pub(super) next_id: TaskId,
    pub(super) shutting_down: bool,
    /// Account key → until when starts are refused (quota or usage limit with a reset time).
    pub(super) quota_until: BTreeMap<String, SystemTime>,
}

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: SupervisorConfig,
    /// This process (the owner written in its tasks' records).
    pub(super) me: ProcId,
    pub(super) inner: Mutex<Inner>,
    pub(super) caps: OnceCell<Result<Capabilities, String>>,
    pub(super) registry: Option<Registry>,
    /// Writes this supervisor's records to `registry` on its own thread.
    pub(super) writer: Option<registry::Writer>,
    /// The warm local servers of served tasks ([`crate::runner::serve::pool`]).
    pub(super) serve_pool: Arc<crate::runner::serve::pool::Pool>,
    /// The budgets' watcher ([`super::budgets::watch`]) runs.
    pub(super) watching: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn with<R>(&self, id: TaskId, f: impl FnOnce(&mut Record) -> R) -> Option<R> {
        self.lock().tasks.get_mut(&id).map(f)
    }
}

impl Drop for Shared {
    /// A supervisor dropped without [`Supervisor::shutdown`](super::Supervisor::shutdown) still leaves every record it made
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

impl Shared {
    /// The state of a supervisor with this configuration. With `config.subreaper` the process
    /// becomes a child subreaper (see [`SupervisorConfig::subreaper`]).
    pub(super) fn open(config: SupervisorConfig) -> Arc<Shared> {
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
                let gone = bridge_isolation::worktree::prune(dir, config.prune_after, done);
                if gone > 0 {
                    tracing::info!(worktrees = gone, "isolated tasks' worktrees pruned");
                }
            }
        }
        Arc::new_cyclic(|me: &std::sync::Weak<Shared>| {
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
        })
    }

    /// The registry directory in use (`None`: tasks are kept in memory only).
    pub(super) fn state_dir(&self) -> Option<&Path> {
        self.registry.as_ref().and(self.config.state_dir.as_deref())
    }
}

pub(super) async fn wait_done(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}
pub(super) fn forget_finished(inner: &mut Inner, keep: usize) {
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
pub(super) fn persist(shared: &Shared, r: &Record, save: Save) {
    if let Some(writer) = &shared.writer {
        let output = (save == Save::WithOutput).then(|| r.output());
        writer.write(r.record(r.state, shared.version().as_deref()), output);
    }
}

impl Shared {
    /// The opencode version in use, once detected.
    pub(super) fn version(&self) -> Option<String> {
        self.caps
            .get()
            .and_then(|c| c.as_ref().ok())
            .map(|c| c.version.clone())
    }
}
