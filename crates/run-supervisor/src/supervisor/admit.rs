//! Stage 1 of a task's pass, admission: what [`Supervisor::start`](super::Supervisor::start)
//! checks before a task is accepted (its arguments, its root, its place, its request id, the
//! budgets and the quota windows), and the accepted task's first record in the table. Nothing
//! runs until a task has passed every check here.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tokio::sync::watch;

use super::budgets::{budget_name, held_with, own_held, reserve_in};
use super::isolated;
use super::record::{Record, Save, StopReason};
use super::table::{MAX_FINISHED_TASKS, Shared, forget_finished, persist};
use crate::command;
use crate::error::StartError;
use crate::registry::TaskRecord;
use crate::runner::serve::Place;
use crate::runner::{Runner, backend};
use crate::spec::TaskSpec;
use crate::task::TaskId;
use bridge_ledger::usage::budget::{self, Verdict};
use bridge_ledger::usage::reserve;

/// What [`Supervisor::start_or_existing`](super::Supervisor::start_or_existing) did.
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
pub(super) fn existing(
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

/// The task of the registry that `key`'s id started, with what it asked (the newest).
pub(super) fn request_on_disk(
    shared: &Shared,
    key: &crate::spec::RequestKey,
) -> Option<(TaskId, crate::spec::RequestKey)> {
    let reg = shared.registry.as_ref()?;
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

/// What the checks found out about a task that may start: where and how it runs.
pub(super) struct Admitted {
    /// Its checked working directory (an isolated task's worktree is made from it).
    pub(super) cwd: PathBuf,
    pub(super) isolated: Option<bridge_isolation::worktree::Checked>,
    pub(super) model: Option<String>,
    pub(super) runner: Runner,
    pub(super) place: Option<Place>,
    /// The account its quota windows are kept under.
    pub(super) account: String,
    pub(super) bin: PathBuf,
}

/// The checks of a start's arguments, root, isolation, checks and place, made before
/// anything is reserved or accepted.
pub(super) fn check(shared: &Shared, spec: &TaskSpec) -> Result<Admitted, StartError> {
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
    let cfg = &shared.config;
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
    let isolated = isolated::start_check(spec, &cwd, shared.state_dir())?;
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
    let place = place_of(shared, spec, runner, isolated.is_some())?;
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
    Ok(Admitted {
        cwd,
        isolated,
        model,
        runner,
        place,
        account,
        bin,
    })
}

/// Where a task runs: `None` for a run of its runner, else the server (the one it names,
/// or the local warm one when the serve engine is configured for opencode tasks).
pub(super) fn place_of(
    shared: &Shared,
    spec: &TaskSpec,
    runner: Runner,
    isolated: bool,
) -> Result<Option<Place>, StartError> {
    let cfg = &shared.config;
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
        (backend(runner).traits().serves && cfg.engine == crate::spec::Engine::Serve)
            .then_some(Place::Local),
    )
}

/// A start's reservation ([`bridge_ledger::usage::reserve`]), made only when the budgets let it
/// start: its `max_cost_usd`, or the default from the ledger. With a state directory the
/// check and the reservation happen under the reservations file's lock, so starts of every
/// bridge on it are decided one after another. Returns the reservation's key (`None`:
/// no state directory, the table holds it) and amount.
pub(super) fn reserve(
    shared: &Shared,
    spec: &TaskSpec,
    cwd: &Path,
) -> Result<(Option<u64>, f64), StartError> {
    let cfg = &shared.config;
    let now = crate::registry::now_ms();
    let limited = !(cfg.budgets.is_empty() && cfg.project_budgets.is_empty());
    let decide = |rows: &[bridge_ledger::usage::ledger::RowRef<'_>],
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
    let Some(dir) = shared.state_dir().map(Path::to_path_buf) else {
        let held: Vec<budget::Held> = own_held(&shared.lock())
            .into_iter()
            .map(|(_, h)| h)
            .collect();
        return decide(&[], &held).map(|a| (None, a));
    };
    let (key, made) = reserve_in(shared, &dir, cwd, now, |rows, list| {
        decide(rows, &held_with(shared, list))
    });
    match made {
        Ok(amount) => amount.map(|a| (Some(key), a)),
        Err(e) => Err(StartError::Registry(format!(
            "the budgets' reservations file {} could not be written ({e}): check that the state directory is writable",
            reserve::path(&dir).display()
        ))),
    }
}

/// What [`accept`] decided: a new task in the table, to be run, or the task an earlier start
/// with the same request id accepted.
pub(super) enum Accepted {
    New {
        id: TaskId,
        /// Where it works (an isolated task: in its worktree).
        cwd: PathBuf,
        stop_rx: watch::Receiver<Option<StopReason>>,
    },
    Existing(Started),
}

/// The table part of [`Supervisor::start`](super::Supervisor::start): what is decided under the
/// task table's lock (shutting down, request ids, quota windows, the parallel limits, a session
/// in use), and the accepted task's first record, holding `reservation`.
pub(super) fn accept(
    shared: &Shared,
    spec: &TaskSpec,
    admitted: Admitted,
    reservation: (Option<u64>, f64),
) -> Result<Accepted, StartError> {
    let Admitted {
        cwd,
        isolated,
        model,
        runner,
        place,
        account,
        bin: _,
    } = admitted;
    let cfg = &shared.config;
    let (stop_tx, stop_rx) = watch::channel(None);
    let id = {
        let mut inner = shared.lock();
        if inner.shutting_down {
            return Err(StartError::ShuttingDown);
        }
        if let Some(key) = &spec.request
            && let Some((task, first)) = inner
                .tasks
                .values()
                .filter(|r| request_fresh(&r.rec))
                .find_map(|r| Some((r.rec.id, r.rec.request.clone().filter(|k| k.id == key.id)?)))
        {
            return existing(key, task, &first).map(Accepted::Existing);
        }
        if let Some(&until) = inner.quota_until.get(&account)
            && until > SystemTime::now()
        {
            return Err(StartError::QuotaWindow {
                account,
                until: bridge_ledger::utc::format(until),
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
        let id = match &shared.registry {
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
        let mut rec = TaskRecord::accepted(id, shared.me, &spec.agent, &spec.title, &cwd);
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
        let durable_session = shared.writer.is_none();
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
            persist(shared, r, Save::Record);
        }
        (id, cwd)
    };
    let (id, cwd) = id;
    Ok(Accepted::New { id, cwd, stop_rx })
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
        resets: bridge_ledger::utc::format(crate::registry::from_ms(s.resets_ms)),
    }))
}
