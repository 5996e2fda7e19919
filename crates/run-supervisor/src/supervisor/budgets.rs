//! The budgets as they stand while tasks run ([`bridge_ledger::usage::budget`]): what every running
//! task holds (this supervisor's from the table, other bridges' from the reservations file),
//! the ledger's rows they are weighed with, and the watch that stops a task once a window it
//! counts against is spent. Not a stage of a task's pass: admission reserves through it, an
//! adopted task reserves again, and the ledger stage releases.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::record::StopReason;
use super::table::{Inner, Shared};
use bridge_ledger::usage::budget::{self, Verdict};
use bridge_ledger::usage::reserve;
use bridge_proc::ProcId;

/// Keys of reservations, unique in this process (several supervisors may share it in tests).
static NEXT_RESERVATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// This supervisor's running tasks as the budgets count them, with their reservation's key.
pub(super) fn own_held(inner: &Inner) -> Vec<(Option<u64>, budget::Held)> {
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

/// Every running task as the budgets count it: this supervisor's from memory, the other
/// bridges' from the reservations file.
fn held_now(shared: &Shared) -> Vec<budget::Held> {
    let list = shared
        .state_dir()
        .and_then(|d| reserve::read(d).ok())
        .unwrap_or_default();
    held_with(shared, &list)
}

/// [`held_now`] with the reservations file's entries `list`: this supervisor's tasks from
/// memory (their use is newer there), every other entry from the file (another bridge's, or one
/// of this supervisor's not in its table yet).
pub(super) fn held_with(shared: &Shared, list: &[reserve::Reservation]) -> Vec<budget::Held> {
    let own = own_held(&shared.lock());
    let keys: BTreeSet<u64> = own.iter().filter_map(|(k, _)| *k).collect();
    let me = shared.me;
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

/// `f` of the ledger's rows under `dir` that a budget standing can count now (none without a
/// state directory or ledger): those of the current UTC month when a month budget is set, else
/// of the current UTC day, read from the ledger's end ([`ledger::read_text_since`]), so that a
/// start or the server's instructions cost a window's rows, not the whole year's file.
///
/// [`ledger::read_text_since`]: bridge_ledger::usage::ledger::read_text_since
pub(super) fn with_ledger<R>(
    shared: &Shared,
    dir: Option<&Path>,
    f: impl FnOnce(&[bridge_ledger::usage::ledger::RowRef<'_>]) -> R,
) -> R {
    with_ledger_since(
        dir,
        window_start(&shared.config, crate::registry::now_ms()),
        f,
    )
}

/// `f` of the ledger's rows under `dir` at or after `since` (and some before it).
fn with_ledger_since<R>(
    dir: Option<&Path>,
    since: u64,
    f: impl FnOnce(&[bridge_ledger::usage::ledger::RowRef<'_>]) -> R,
) -> R {
    let text = dir
        .and_then(|d| bridge_ledger::usage::ledger::read_text_since(d, since).ok())
        .unwrap_or_default();
    let (rows, _) = bridge_ledger::usage::ledger::parse_text(&text);
    let rows: Vec<_> = rows
        .iter()
        .map(bridge_ledger::usage::ledger::TextRow::view)
        .collect();
    f(&rows)
}

/// The start of the earliest budget window at `now`: the UTC month's when a month budget (the
/// bridge's or a project's) is set, else the UTC day's (which the day's spend needs anyway).
fn window_start(cfg: &crate::spec::SupervisorConfig, now: u64) -> u64 {
    let [(day, _), (month, _)] = bridge_ledger::utc::day_and_month_bounds(now);
    let monthly = cfg.budgets.month_usd.is_some()
        || cfg
            .project_budgets
            .iter()
            .any(|p| p.budgets.month_usd.is_some());
    if monthly { month } else { day }
}

/// Adds this bridge's reservation for a task in `cwd` to the reservations file under `dir`,
/// under the file's lock: `amount` decides it from the ledger's rows and the reservations
/// held so far (an `Err` adds none and is returned as it is). Returns the reservation's key
/// and what `amount` decided, or why the file could not be written.
pub(super) fn reserve_in<E>(
    shared: &Shared,
    dir: &Path,
    cwd: &Path,
    now: u64,
    amount: impl FnOnce(
        &[bridge_ledger::usage::ledger::RowRef<'_>],
        &[reserve::Reservation],
    ) -> Result<f64, E>,
) -> (u64, std::io::Result<Result<f64, E>>) {
    let key = NEXT_RESERVATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let me = shared.me;
    let made = reserve::update(dir, |list| {
        // The budgets' windows, and the days a reservation's default amount looks back on.
        let lookback = now.saturating_sub(reserve::DEFAULT_LOOKBACK_DAYS * 86_400_000);
        let since = window_start(&shared.config, now).min(lookback);
        let amount = with_ledger_since(Some(dir), since, |rows| amount(rows, list))?;
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
    (key, made)
}

/// Whether a task in `cwd` may start now by the budgets: the ledger's spend in each window plus
/// what running tasks (of every bridge on the state directory) have used so far or reserved.
pub(super) fn check(shared: &Shared, cwd: Option<&Path>) -> Verdict {
    let cfg = &shared.config;
    if cfg.budgets.is_empty() && cfg.project_budgets.is_empty() {
        return Verdict::Allow(Vec::new());
    }
    let held = held_now(shared);
    with_ledger(shared, shared.state_dir(), |rows| {
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

/// Where every budget that applies to a task in `cwd` stands, over ledger rows already read,
/// and what was spent today (UTC) in all.
pub(super) fn report_of(
    shared: &Shared,
    rows: &[bridge_ledger::usage::ledger::RowRef<'_>],
    cwd: Option<&Path>,
) -> (Vec<budget::Standing>, f64) {
    let now = crate::registry::now_ms();
    let running = held_now(shared);
    let cfg = &shared.config;
    let standings = budget::standings(rows, &cfg.budgets, &cfg.project_budgets, cwd, &running, now);
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

/// Drops reservation `key` of owner `me` from the file under `dir`.
pub(super) fn release_in(dir: Option<PathBuf>, me: ProcId, key: Option<u64>) {
    if let (Some(dir), Some(key)) = (dir, key)
        && let Err(e) = reserve::update(&dir, |l| l.retain(|r| !(r.owner() == me && r.key == key)))
    {
        tracing::warn!(
            "a budget reservation could not be released ({e}); it expires with this bridge"
        );
    }
}

/// Releases a reservation this supervisor made (`None`: nothing to release).
pub(super) fn release(shared: &Shared, key: Option<u64>) {
    release_in(shared.state_dir().map(Path::to_path_buf), shared.me, key);
}

/// Starts the watch ([`watch`]) once, with the first task that reserves.
pub(super) fn start_watch(shared: &std::sync::Arc<Shared>) {
    if !shared
        .watching
        .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tokio::spawn(watch(std::sync::Arc::downgrade(shared)));
    }
}

/// Runs [`tick`] once a second until the supervisor is dropped.
async fn watch(weak: std::sync::Weak<Shared>) {
    let mut tick_at = tokio::time::interval(Duration::from_secs(1));
    tick_at.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick_at.tick().await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        let _ = tokio::task::spawn_blocking(move || tick(&shared)).await;
    }
}

/// Once a second while tasks run: writes what this supervisor's running tasks have used
/// to their reservations (for the other bridges), and stops each running task a spent
/// budget window covers (kind `budget`).
fn tick(shared: &Shared) {
    let own = own_held(&shared.lock());
    if own.is_empty() {
        return;
    }
    let me = shared.me;
    let list = match shared.state_dir() {
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
    let cfg = &shared.config;
    if cfg.budgets.is_empty() && cfg.project_budgets.is_empty() {
        return;
    }
    let held = held_with(shared, &list);
    let now = crate::registry::now_ms();
    let spent: Vec<(PathBuf, budget::Standing)> = with_ledger(shared, shared.state_dir(), |rows| {
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
    let mut inner = shared.lock();
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
                bridge_ledger::utc::format(crate::registry::from_ms(s.resets_ms))
            ));
            r.stop.send_replace(Some(StopReason::Budget));
        }
    }
}

/// `day budget` or `month budget of project /p`.
pub(super) fn budget_name(s: &budget::Standing) -> String {
    match &s.project {
        Some(p) => format!("{} budget of project {}", s.window.as_str(), p.display()),
        None => format!("{} budget", s.window.as_str()),
    }
}
