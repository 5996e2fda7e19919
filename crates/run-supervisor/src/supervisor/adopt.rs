//! Following left tasks, the other way into stage 4 (attempt and follow): a task a bridge that
//! is gone left running as a session on a server is taken into this supervisor's table from its
//! record, holds a reservation again, and is followed as if it had never been left. Nothing
//! here refuses such a task for the budgets: it runs already.

use std::path::{Path, PathBuf};

use tokio::sync::watch;

use super::budgets::{release, reserve_in};
use super::record::{Record, Save, StopReason};
use super::table::{Shared, persist};
use crate::registry::{self, Owner, TaskRecord, judge, settle_lost};
use crate::runner::serve::Place;
use crate::runner::{Runner, backend};
use crate::spec::TaskSpec;
use crate::task::{TaskId, TaskState};
use bridge_ledger::usage::reserve;

/// A task taken in, to be followed: what its pass needs.
pub(super) struct Adopted {
    pub(super) id: TaskId,
    pub(super) spec: TaskSpec,
    pub(super) cwd: PathBuf,
    pub(super) bin: PathBuf,
    pub(super) stop_rx: watch::Receiver<Option<StopReason>>,
}

/// The registry's tasks that run as sessions on a server and whose bridge is gone
/// ([`Owner::Resumable`]), each taken into the table (owner, record, reservation) and returned
/// to be followed. A task whose remote server is no longer in the config file is recorded lost.
pub(super) async fn left_tasks(shared: &Shared) -> Vec<Adopted> {
    let Some(reg) = shared.registry.clone() else {
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
            Some(Place::Remote(name)) => shared.config.servers.iter().any(|s| &s.name == name),
            Some(Place::Local) => true,
            None => false,
        };
        if !known {
            settle_lost(&mut t, registry::now_ms());
            if let Some(reg) = &shared.registry {
                reg.write_task(&t);
            }
            continue;
        }
        let (server, bin) = match place {
            Some(Place::Remote(server)) => (Some(server), PathBuf::new()),
            _ => {
                let runner = Runner::for_model(t.model.as_deref());
                match backend(runner).binary(&shared.config) {
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
        let reservation = reserve_adopted(shared, &t.cwd, t.max_cost_usd);
        {
            let mut inner = shared.lock();
            if inner.tasks.contains_key(&id) || inner.shutting_down {
                drop(inner);
                release(shared, reservation.0);
                continue;
            }
            t.owner = shared.me.into();
            let mut r = Record::new(
                t.clone(),
                Runner::for_model(t.model.as_deref()),
                shared.config.output_cap,
                stop_tx,
                true,
                shared.config.pricing.clone(),
            );
            r.resume = true;
            r.state = TaskState::Running;
            r.reserved = reservation;
            inner.tasks.insert(id, r);
            if let Some(r) = inner.tasks.get(&id) {
                persist(shared, r, Save::Record);
            }
        }
        adopted.push(Adopted {
            id,
            cwd: t.cwd.clone(),
            spec,
            bin,
            stop_rx,
        });
    }
    adopted
}

/// The reservation of a task adopted from a bridge that is gone (whose reservation went
/// with it): its `max_cost_usd` when it had one, else the default amount from the ledger
/// ([`reserve::default_amount`]), made without
/// a budget check (the task runs already). Its key is `None` without a state directory or
/// when the file cannot be written (the table still counts the amount).
fn reserve_adopted(shared: &Shared, cwd: &Path, cap: Option<f64>) -> (Option<u64>, f64) {
    let now = crate::registry::now_ms();
    let Some(dir) = shared.state_dir().map(Path::to_path_buf) else {
        return (None, reserve::DEFAULT_FLOOR_USD);
    };
    let (key, made) = reserve_in(shared, &dir, cwd, now, |rows, _| {
        Ok::<_, std::convert::Infallible>(cap.unwrap_or_else(|| reserve::default_amount(rows, now)))
    });
    match made {
        Ok(Ok(amount)) => (Some(key), amount),
        Ok(Err(never)) => match never {},
        Err(e) => {
            tracing::warn!("an adopted task's budget reservation could not be written ({e})");
            (None, reserve::DEFAULT_FLOOR_USD)
        }
    }
}
