//! A child process started in its own process group, signalled only while its pid is
//! guaranteed to be ours.
//!
//! The leader is watched with `waitid(…, WNOWAIT)`, which notices an exit without reaping it.
//! While the leader is unreaped (alive or a zombie), its pid, and so the group id, cannot be
//! reused, so signalling the group reaches only processes we started (the child and its
//! descendants that stayed in the group). The leader is reaped last.

use std::collections::BTreeSet;
use std::process::{Child, Command, ExitStatus};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The leaders of this process's unreaped groups. A leader leaves it (under the lock) before it
/// is reaped, so [`stop_all_groups`], which holds the lock while it signals, reaches only groups
/// whose leader's pid is still ours.
static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

fn live() -> std::sync::MutexGuard<'static, BTreeSet<u32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Stops every group this process started through [`GroupChild`] and has not reaped: SIGTERM to
/// each, up to `grace` for their leaders to exit, then SIGKILL to each group. For the end of the
/// process, where a thread that owns one (a server started for a call the runtime no longer
/// waits for) would otherwise leave it running: the leaders are reaped by whoever adopts them.
/// Blocks up to `grace`; an owner that reaps meanwhile waits for it.
pub fn stop_all_groups(grace: Duration) {
    let live = live();
    if live.is_empty() {
        return;
    }
    let signal = |sig| {
        for &pid in live.iter() {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
            }
        }
    };
    signal(nix::sys::signal::Signal::SIGTERM);
    let deadline = crate::deadline::after(grace);
    while Instant::now() < deadline && live.iter().any(|&pid| !leader_exited(pid)) {
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(nix::sys::signal::Signal::SIGKILL);
}

/// Whether the child `pid` has exited (it is not reaped by this).
fn leader_exited(pid: u32) -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    use nix::unistd::Pid;
    let Ok(pid) = i32::try_from(pid) else {
        return true;
    };
    match waitid(
        Id::Pid(Pid::from_raw(pid)),
        WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
    ) {
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) => true,
        // ECHILD: already reaped elsewhere; treat as gone.
        Err(_) => true,
    }
}

/// A spawned child leading its own process group.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
    status: Option<ExitStatus>,
}

impl GroupChild {
    /// Spawns `cmd` as the leader of a new process group.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<GroupChild> {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
        let mut live = live();
        let child = cmd.spawn()?;
        live.insert(child.id());
        Ok(GroupChild {
            child,
            status: None,
        })
    }

    /// The leader's `Child`, to take its pipes. Do not wait on it or kill it directly: that
    /// would reap the leader behind this guard's back (use [`GroupChild::stop`] and friends).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// The leader's pid (also the group id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the leader has exited (it is not reaped by this).
    pub fn has_exited(&self) -> bool {
        self.status.is_some() || leader_exited(self.child.id())
    }

    /// Waits up to `timeout` for the leader to exit (without reaping it).
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        let end = crate::deadline::after(timeout);
        loop {
            if self.has_exited() {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `sig` to the whole group, as long as the leader is not reaped yet.
    pub fn signal_group(&self, sig: nix::sys::signal::Signal) {
        if self.status.is_some() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    /// SIGKILLs whatever is left of the group, then reaps the leader.
    pub fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        self.signal_group(nix::sys::signal::Signal::SIGKILL);
        self.reap()
    }

    /// SIGTERM to the group, `grace` for the leader to exit, SIGKILL to the group, reap.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.signal_group(nix::sys::signal::Signal::SIGTERM);
            self.wait_exit(grace);
        }
        self.kill_and_reap()
    }

    /// Lets the child go on without us: it leaves the list [`stop_all_groups`] stops, and is
    /// neither signalled nor reaped by this guard again (whoever adopts it reaps it, once this
    /// process has ended). For a service meant to outlive this process; its pid is returned.
    /// Its pid is ours no longer: later signals go through a start-time check
    /// ([`crate::ProcId`], [`crate::stop_left_group`]).
    pub fn release(self) -> u32 {
        let pid = self.child.id();
        live().remove(&pid);
        // No drop: that would stop and reap it.
        std::mem::forget(self);
        pid
    }

    fn reap(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            live().remove(&self.child.id());
            self.status = self.child.wait().ok();
        }
        self.status
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill_and_reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A released child goes on running, and `stop_all_groups` no longer reaches it.
    #[test]
    fn a_released_child_runs_on_and_is_not_stopped_with_the_others() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let child = GroupChild::spawn(&mut cmd).unwrap();
        let id = crate::ProcId::of(child.pid() as i32).unwrap();
        let pid = child.release();
        assert_eq!(pid as i32, id.pid);
        assert!(!live().contains(&pid));
        assert!(id.is_alive(), "released means left running");
        // The test's own cleanup of the fixture it started.
        assert!(id.signal(nix::sys::signal::Signal::SIGKILL));
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(id.pid), None);
    }

    /// A group whose owner never stops it (a thread abandoned at exit) is stopped whole by
    /// `stop_all_groups`; a reaped one is no longer signalled (its pid may be anyone's).
    #[test]
    fn stop_all_groups_reaches_an_abandoned_group_and_not_a_reaped_one() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' TERM; sleep 60 & sleep 60; wait"]);
        let abandoned = GroupChild::spawn(&mut cmd).unwrap();
        let pid = abandoned.pid();
        let mut done = GroupChild::spawn(Command::new("true").arg("x")).unwrap();
        done.kill_and_reap();
        assert!(!live().contains(&done.pid()));
        std::mem::forget(abandoned);
        std::thread::sleep(Duration::from_millis(200));
        stop_all_groups(Duration::from_millis(300));
        let members = |pgid: u32| {
            std::fs::read_dir("/proc")
                .unwrap()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&p| {
                    crate::ident::stat_of(p)
                        .is_some_and(|s| s.pgrp == pgid as i32 && s.state != 'Z')
                })
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while members(pid) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(members(pid), 0, "the abandoned group survived");
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
    }
}
