//! Stage 7 of a task's pass, the ledger: a task's end. Its last record and output go to the
//! registry, its spend to the usage ledger, and only then is its budget reservation released
//! and the task shown finished.

use std::time::{Instant, SystemTime};

use super::budgets::release_in;
use super::table::{MAX_FINISHED_TASKS, Shared, forget_finished};
use crate::classify::{Failure, FailureKind};
use crate::runner::backend;
use crate::task::{TaskId, TaskState};
use bridge_ledger::quota;
use bridge_proc::stream::HeadTail;

/// stderr bytes kept once a task has finished (its tail).
const FINISHED_STDERR: usize = 64 * 1024;

/// Remembers the quota window of a task refused for quota, so later starts on the same account
/// are refused early.
fn note_quota_window(shared: &Shared, id: TaskId, failure: Option<&Failure>) {
    // Only a quota opens a window: a rate limit is the provider's pace, not an account's end.
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
        .map(|t| t.at)
        .filter(|t| *t > quota::later(SystemTime::now(), quota::MIN_WINDOW))
    else {
        return;
    };
    let key = backend(r.runner).account_key(r.rec.model.as_deref());
    inner.quota_until.insert(key, until);
}

/// Ends a task: its last record and output go to the registry first, and only once they are
/// on disk is it shown finished (and may leave memory), so no caller ever hears of an outcome
/// that a restarted bridge would not know.
pub(super) async fn finish(
    shared: &Shared,
    id: TaskId,
    state: TaskState,
    failure: Option<Failure>,
) {
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
            let version = shared.version();
            shared
                .writer
                .as_ref()
                .map(|w| w.write_acked(r.record(state, version.as_deref()), Some(r.output())))
        })
        .flatten();
    let saved = match written {
        Some(ack) => ack.await.unwrap_or(false),
        None => false,
    };
    // Its spend goes to the ledger before anyone hears it finished: a start after this one's
    // end sees it against the budgets.
    if let Some(dir) = shared
        .registry
        .as_ref()
        .and(shared.config.state_dir.clone())
        && let Some(rows) = shared.with(id, ledger_rows)
        && !rows.is_empty()
    {
        let write = move || bridge_ledger::usage::ledger::append(&dir, &rows);
        if let Ok(Err(e)) = tokio::task::spawn_blocking(write).await {
            tracing::warn!("task {id}: its usage could not be added to the ledger: {e}");
        }
    }
    // Only then is its reservation released: for a moment it counts twice, never not at all.
    release_reservation(shared, id).await;
    shared.with(id, |r| {
        r.state = state;
        r.saved = saved;
        r.done.send_replace(true);
    });
    forget_finished(&mut shared.lock(), MAX_FINISHED_TASKS);
}

/// The ledger's rows of a finished task: one per attempt.
fn ledger_rows(r: &mut super::record::Record) -> Vec<bridge_ledger::usage::ledger::Row> {
    let at_ms = crate::registry::now_ms();
    let runner = r.runner.to_string();
    let lane = bridge_ledger::usage::ledger::lane_of(&r.rec.title);
    r.attempt_usages()
        .into_iter()
        .enumerate()
        .map(|(i, usage)| bridge_ledger::usage::ledger::Row {
            v: bridge_ledger::usage::ledger::LEDGER_VERSION,
            at_ms,
            task: r.rec.id,
            attempt: i as u32 + 1,
            agent: r.rec.agent.clone(),
            model: r.rec.model.clone(),
            runner: runner.clone(),
            engine: r.rec.engine.clone(),
            lane: lane.clone(),
            project: r.rec.cwd.clone(),
            usage,
        })
        .collect()
}

/// Releases task `id`'s reservation (once its spend is on the ledger).
pub(super) async fn release_reservation(shared: &Shared, id: TaskId) {
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
