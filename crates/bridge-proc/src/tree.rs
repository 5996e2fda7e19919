//! Descendants from the `/proc` walk, and the kill sequence of a process tree.
//!
//! Only a root we started and its descendants are signalled, each after its start-time check
//! ([`ProcId::signal`]); the group signal goes only to a root whose start time still matches.
//!
//! Descendants are found through `/proc` parent links, which also finds children that left
//! the process group with `setsid`. Snapshots are taken while the run is alive and again at
//! kill time, so a descendant whose parent already died is still known.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use crate::ident::{ProcId, StatInfo, read_stat, stat_of};

fn all_stats() -> HashMap<i32, StatInfo> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    let (mut path, mut buf) = (String::with_capacity(24), Vec::with_capacity(512));
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // A process that ended since the directory was read is simply not in the table.
        if let Some(st) = read_stat(pid, &mut path, &mut buf) {
            map.insert(pid, st);
        }
    }
    map
}

type Stats = HashMap<i32, StatInfo>;
type Children = HashMap<i32, Vec<i32>>;

fn children_map(stats: &Stats) -> Children {
    let mut children: Children = HashMap::new();
    for (&pid, s) in stats {
        children.entry(s.ppid).or_default().push(pid);
    }
    children
}

fn descendants_in(stats: &Stats, children: &Children, root: ProcId) -> BTreeSet<ProcId> {
    let mut out = BTreeSet::new();
    let root_alive = stats
        .get(&root.pid)
        .is_some_and(|s| s.start_time == root.start_time);
    if !root_alive {
        return out;
    }
    let mut stack = vec![root.pid];
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            let s = stats[&c];
            // A child cannot be older than its parent: guards against stale links.
            if s.start_time >= root.start_time && s.state != 'Z' {
                out.insert(ProcId {
                    pid: c,
                    start_time: s.start_time,
                });
            }
            stack.push(c);
        }
    }
    // Group members only count while the leader is the same process: once it is gone, its
    // pid (and so the group id) may be reused by something else.
    for (&pid, s) in stats {
        if s.pgrp == root.pid
            && pid != root.pid
            && s.start_time >= root.start_time
            && s.state != 'Z'
        {
            out.insert(ProcId {
                pid,
                start_time: s.start_time,
            });
        }
    }
    out
}

/// Adds the live descendants of `root` and of each known process to `known` (descendants of
/// descendants that were reparented after their parent died are found through the known
/// set). One fresh scan of `/proc`.
pub fn refresh_known(root: ProcId, known: &mut BTreeSet<ProcId>) {
    refresh_from(&table(Duration::ZERO), root, known);
}

/// Like [`refresh_known`], but content with a scan of `/proc` another caller took at most
/// `max_age` ago. The periodic refresh of every running task uses it, so many tasks share one
/// walk of the process table instead of each making its own; kills use fresh scans.
pub fn refresh_known_recent(root: ProcId, known: &mut BTreeSet<ProcId>, max_age: Duration) {
    refresh_from(&table(max_age), root, known);
}

fn refresh_from(t: &Table, root: ProcId, known: &mut BTreeSet<ProcId>) {
    let mut roots: Vec<ProcId> = vec![root];
    roots.extend(known.iter().copied().filter(|p| {
        t.stats
            .get(&p.pid)
            .is_some_and(|s| s.start_time == p.start_time && s.state != 'Z')
    }));
    for r in roots {
        known.extend(descendants_in(&t.stats, &t.children, r));
    }
}

/// One walk of `/proc`: every process and its parent links.
struct Table {
    taken: Instant,
    stats: Stats,
    children: Children,
}

/// The latest walk, shared by [`refresh_known_recent`] callers.
static RECENT: Mutex<Option<Arc<Table>>> = Mutex::new(None);

/// A walk no older than `max_age` (zero: a fresh one).
fn table(max_age: Duration) -> Arc<Table> {
    table_in(&RECENT, max_age)
}

fn table_in(cache: &Mutex<Option<Arc<Table>>>, max_age: Duration) -> Arc<Table> {
    let recent = || cache.lock().unwrap_or_else(PoisonError::into_inner);
    if !max_age.is_zero()
        && let Some(t) = recent().as_ref()
        && t.taken.elapsed() <= max_age
    {
        return t.clone();
    }
    let taken = Instant::now();
    let stats = all_stats();
    let children = children_map(&stats);
    let t = Arc::new(Table {
        taken,
        stats,
        children,
    });
    *recent() = Some(t.clone());
    t
}

/// Makes this process a child subreaper, so orphaned descendants of our children are
/// reparented to us (and can be reaped) instead of to init.
pub fn become_subreaper() -> bool {
    nix::sys::prctl::set_child_subreaper(true).is_ok()
}

/// Reaps `p` if it became our child (we are a subreaper) and is a zombie. Never waits on a
/// pid that is not a zombie child of ours, so no one else's child status is stolen.
pub fn reap_if_our_zombie(p: ProcId) {
    let me = std::process::id() as i32;
    if let Some(s) = stat_of(p.pid)
        && s.start_time == p.start_time
        && s.ppid == me
        && s.state == 'Z'
    {
        let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
    }
}

/// Terminates a process tree: SIGTERM to the group `root.pid` (if `root` is still the same
/// process) and to every known descendant, waits up to `grace` for all to exit, then SIGKILL to
/// whatever is left. Returns the processes that were signalled. The root itself must be reaped
/// by its owner (tokio's `Child::wait`); reparented zombies are reaped here.
pub async fn terminate_tree(root: ProcId, known: &mut BTreeSet<ProcId>, grace: Duration) -> usize {
    refresh_known(root, known);
    let mut signalled = 0;
    let group_ok = root.exists();
    if group_ok && killpg(Pid::from_raw(root.pid), Signal::SIGTERM).is_ok() {
        signalled += 1;
    }
    for p in known.iter() {
        if p.signal(Signal::SIGTERM) {
            signalled += 1;
        }
    }
    let deadline = crate::deadline::after_tokio(grace);
    loop {
        refresh_known(root, known);
        let root_alive = root.is_alive();
        let any_alive = root_alive || known.iter().any(ProcId::is_alive);
        if !any_alive || tokio::time::Instant::now() >= deadline {
            break;
        }
        for p in known.iter() {
            reap_if_our_zombie(*p);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    refresh_known(root, known);
    // The group may contain members not yet in `known`; the group id stays valid while the
    // root (group leader) exists, even as a zombie.
    if root.exists() {
        let _ = killpg(Pid::from_raw(root.pid), Signal::SIGKILL);
    }
    for p in known.iter() {
        if p.signal(Signal::SIGKILL) {
            signalled += 1;
        }
    }
    signalled
}

/// Kills any still-alive known descendant (SIGKILL, after the start-time check) and reaps
/// those that became our zombies, waiting up to `wait` for them to disappear.
pub async fn sweep(known: &BTreeSet<ProcId>, wait: Duration) {
    for p in known {
        p.signal(Signal::SIGKILL);
    }
    let deadline = crate::deadline::after_tokio(wait);
    loop {
        for p in known {
            reap_if_our_zombie(*p);
        }
        let me = std::process::id() as i32;
        let pending = known.iter().any(|p| {
            matches!(stat_of(p.pid), Some(s) if s.start_time == p.start_time && (s.state != 'Z' || s.ppid == me))
        });
        if !pending || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops the process group that `leader` leads, for a bridge that started it and died without
/// stopping it (a warm `opencode serve` left by a SIGKILLed bridge): SIGTERM to the group while
/// `leader` is still that process and still leads its own group, up to `grace` for the group to
/// empty, then SIGKILL to each member left (a process of that group started no earlier than the
/// leader, each after its start-time check). The leader is not our child: whoever adopted it
/// reaps it. Blocks up to `grace`. Returns whether the group was signalled.
pub fn stop_left_group(leader: ProcId, grace: Duration) -> bool {
    let leads = matches!(stat_of(leader.pid), Some(s)
        if s.start_time == leader.start_time && s.pgrp == leader.pid && s.state != 'Z');
    if !leads || killpg(Pid::from_raw(leader.pid), Signal::SIGTERM).is_err() {
        return false;
    }
    let members = || -> Vec<ProcId> {
        all_stats()
            .into_iter()
            .filter(|(_, s)| {
                s.pgrp == leader.pid && s.start_time >= leader.start_time && s.state != 'Z'
            })
            .map(|(pid, s)| ProcId {
                pid,
                start_time: s.start_time,
            })
            .collect()
    };
    let deadline = crate::deadline::after(grace);
    while Instant::now() < deadline && !members().is_empty() {
        std::thread::sleep(Duration::from_millis(25));
    }
    for p in members() {
        p.signal(Signal::SIGKILL);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lean_walk_agrees_with_procfs_on_this_process_and_its_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let me = std::process::id() as i32;
        let kid = child.id() as i32;
        let cache = Mutex::new(None);
        let table = table_in(&cache, Duration::ZERO);
        for pid in [me, kid] {
            let ours = table.stats.get(&pid).copied().expect("in the table");
            let theirs = procfs::process::Process::new(pid).unwrap().stat().unwrap();
            assert_eq!(ours.start_time, theirs.starttime, "pid {pid}");
            assert_eq!(ours.ppid, theirs.ppid, "pid {pid}");
            assert_eq!(ours.pgrp, theirs.pgrp, "pid {pid}");
        }
        assert!(table.children.get(&me).is_some_and(|c| c.contains(&kid)));
        // A recent walk is shared; a fresh one is not, and replaces it.
        let again = table_in(&cache, Duration::from_secs(60));
        assert!(Arc::ptr_eq(&table, &again));
        let fresh = table_in(&cache, Duration::ZERO);
        assert!(!Arc::ptr_eq(&table, &fresh));
        assert!(Arc::ptr_eq(
            &fresh,
            &table_in(&cache, Duration::from_secs(60))
        ));
        let root = ProcId::of(me).unwrap();
        let mut known = BTreeSet::new();
        refresh_known_recent(root, &mut known, Duration::from_secs(60));
        assert!(known.iter().any(|p| p.pid == kid), "{known:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_left_group_is_stopped_whole_and_a_wrong_id_is_not_signalled() {
        use std::os::unix::process::CommandExt;
        // A leader ignoring SIGTERM and a member that does not: SIGKILL ends what is left.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "trap '' TERM; sleep 60 & sleep 60; wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let leader = ProcId::of(child.id() as i32).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let wrong = ProcId {
            start_time: leader.start_time + 1,
            ..leader
        };
        assert!(!stop_left_group(wrong, Duration::from_millis(100)));
        assert!(leader.is_alive());
        assert!(stop_left_group(leader, Duration::from_millis(300)));
        // SIGKILL was sent to each member left (`trap '' TERM` is inherited by `sleep`); the
        // kernel ends them at once, but not before the call returns.
        let left = || {
            all_stats()
                .into_iter()
                .filter(|(_, s)| s.pgrp == leader.pid && s.state != 'Z')
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while left() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(left(), 0, "members of the group are left");
        child.wait().unwrap();
    }
}
