//! Reservations: what each running task may still spend, shared by every bridge on one state
//! directory, so that starts in quick succession (or from several bridges) cannot together
//! pass a budget that each alone would fit.
//!
//! A start reserves its `max_cost_usd`, or without one [`default_amount`]: the costliest task
//! of the last [`DEFAULT_LOOKBACK_DAYS`] days in the ledger, at least [`DEFAULT_FLOOR_USD`].
//! Against a budget a running task counts at the larger of its reservation and what it has
//! used so far.
//!
//! The reservations live in `<state dir>/usage/reservations-v1.json` beside the ledger. Every
//! change takes an exclusive `flock` on that file, reads it, drops the reservations whose
//! owner (the bridge, by pid and start time: [`bridge_proc::ProcId`]) is gone, changes it and
//! writes it back before the lock is released; readers take a shared lock. A task's
//! reservation is released when the task ends, after its spend is on the ledger (so for a
//! moment it counts twice, never not at all). The owner also writes what each of its running
//! tasks has used so far (`used_usd`), about once a second while they run, which the other
//! bridges read when they decide whether a window is spent.

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ledger::RowRef;

/// The least a start without `max_cost_usd` reserves, USD.
pub const DEFAULT_FLOOR_USD: f64 = 0.05;

/// How far back the ledger is read for the default reservation, days.
pub const DEFAULT_LOOKBACK_DAYS: u64 = 7;

/// The reservations file under the state directory.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join("usage").join("reservations-v1.json")
}

/// One running task's reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reservation {
    /// The bridge that made it: pid.
    pub pid: i32,
    /// The bridge that made it: start time (clock ticks after boot).
    pub start_time: u64,
    /// Unique within the owner (the owner's own counter).
    pub key: u64,
    /// The task's working directory (project budgets).
    pub project: PathBuf,
    /// Reserved, USD.
    pub amount_usd: f64,
    /// Used so far, as the owner last wrote it, USD.
    #[serde(default)]
    pub used_usd: f64,
    /// When it was made (epoch ms).
    pub at_ms: u64,
}

impl Reservation {
    /// The bridge that made it.
    pub fn owner(&self) -> bridge_proc::ProcId {
        bridge_proc::ProcId {
            pid: self.pid,
            start_time: self.start_time,
        }
    }

    /// What it counts at against a budget: its amount or its use, the larger.
    pub fn held(&self) -> f64 {
        self.amount_usd.max(self.used_usd)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    reservations: Vec<Reservation>,
}

fn open(state_dir: &Path) -> std::io::Result<std::fs::File> {
    let p = path(state_dir);
    if let Some(d) = p.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&p)
}

fn parse(text: &str) -> Vec<Reservation> {
    // A file torn by a crash mid-write holds nothing that can be trusted: it reads as empty,
    // and the next change writes it whole again.
    serde_json::from_str::<File>(text)
        .map(|f| f.reservations)
        .unwrap_or_default()
}

/// Changes the reservations under an exclusive lock: `f` gets them with those of gone owners
/// already dropped; what it leaves is written back. Returns what `f` returns.
pub fn update<R>(
    state_dir: &Path,
    f: impl FnOnce(&mut Vec<Reservation>) -> R,
) -> std::io::Result<R> {
    let file = open(state_dir)?;
    let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| std::io::Error::from(e))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    let before = parse(&text);
    let mut list: Vec<Reservation> = before
        .iter()
        .filter(|r| r.owner().is_alive())
        .cloned()
        .collect();
    let out = f(&mut list);
    if list != before {
        let mut bytes =
            serde_json::to_vec(&File { reservations: list }).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        file.rewind()?;
        file.set_len(0)?;
        file.write_all(&bytes)?;
    }
    Ok(out)
}

/// The reservations of live owners (none when there is no file), read under a shared lock.
pub fn read(state_dir: &Path) -> std::io::Result<Vec<Reservation>> {
    let file = match std::fs::File::open(path(state_dir)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockShared)
        .map_err(|(_, e)| std::io::Error::from(e))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(parse(&text)
        .into_iter()
        .filter(|r| r.owner().is_alive())
        .collect())
}

/// What a start without `max_cost_usd` reserves: the costliest task (its attempts added up,
/// at what it counts against a budget) of the ledger's last [`DEFAULT_LOOKBACK_DAYS`] days,
/// and at least [`DEFAULT_FLOOR_USD`].
pub fn default_amount(rows: &[RowRef<'_>], now_ms: u64) -> f64 {
    let since = now_ms.saturating_sub(DEFAULT_LOOKBACK_DAYS * 86_400_000);
    let mut by_task: std::collections::HashMap<u64, f64> = std::collections::HashMap::new();
    for r in rows
        .iter()
        .filter(|r| r.at_ms >= since && r.at_ms <= now_ms)
    {
        *by_task.entry(r.task).or_default() += r.usage.budget_cost();
    }
    by_task
        .into_values()
        .filter(|c| c.is_finite())
        .fold(DEFAULT_FLOOR_USD, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::ledger::tests::row;

    fn me() -> bridge_proc::ProcId {
        bridge_proc::ProcId::of(std::process::id() as i32).unwrap()
    }

    fn res(owner: bridge_proc::ProcId, key: u64, amount: f64) -> Reservation {
        Reservation {
            pid: owner.pid,
            start_time: owner.start_time,
            key,
            project: "/p".into(),
            amount_usd: amount,
            used_usd: 0.0,
            at_ms: 1,
        }
    }

    #[test]
    fn reservations_are_shared_and_those_of_gone_owners_expire() {
        let dir = tempfile::tempdir().unwrap();
        let me = me();
        // A bridge that is gone: a pid that exists with another start time.
        let gone = bridge_proc::ProcId {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        update(dir.path(), |l| {
            l.push(res(me, 1, 0.5));
            l.push(res(gone, 1, 9.0));
        })
        .unwrap();
        // Read back: the gone owner's reservation does not count.
        let all = read(dir.path()).unwrap();
        assert_eq!(all, [res(me, 1, 0.5)]);
        // The next change drops it from the file too.
        update(dir.path(), |l| {
            assert_eq!(l.len(), 1);
            l[0].used_usd = 0.75;
        })
        .unwrap();
        let text = std::fs::read_to_string(path(dir.path())).unwrap();
        assert!(!text.contains("9.0"), "{text}");
        assert_eq!(read(dir.path()).unwrap()[0].held(), 0.75);
        update(dir.path(), |l| l.retain(|r| r.key != 1)).unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        // A torn file reads as empty, and is written whole again by the next change.
        std::fs::write(path(dir.path()), b"{\"reservations\":[{\"pid\"").unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
        update(dir.path(), |l| l.push(res(me, 2, 0.1))).unwrap();
        assert_eq!(read(dir.path()).unwrap().len(), 1);
    }

    #[test]
    fn the_default_is_the_costliest_recent_task_with_a_floor() {
        let day = 86_400_000;
        let now = 100 * day;
        assert_eq!(default_amount(&[], now), DEFAULT_FLOOR_USD);
        // Task 1's two attempts add up to 0.30; task 3 is older than the lookback.
        let rows = [
            row(1, 1, now - day, 0.1),
            row(1, 2, now - day, 0.2),
            row(2, 1, now, 0.25),
            row(3, 1, now - 8 * day, 5.0),
        ];
        let v: Vec<_> = rows.iter().map(crate::usage::ledger::Row::view).collect();
        assert!((default_amount(&v, now) - 0.3).abs() < 1e-12);
        let cheap = [row(4, 1, now, 0.001)];
        let v: Vec<_> = cheap.iter().map(crate::usage::ledger::Row::view).collect();
        assert_eq!(default_amount(&v, now), DEFAULT_FLOOR_USD);
    }
}
