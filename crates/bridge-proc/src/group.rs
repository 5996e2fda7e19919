//! A child process started in its own process group, signalled only while its pid is
//! guaranteed to be ours.
//!
//! The leader is watched with `waitid(…, WNOWAIT)`, which notices an exit without reaping it.
//! While the leader is unreaped (alive or a zombie), its pid, and so the group id, cannot be
//! reused, so signalling the group reaches only processes we started (the child and its
//! descendants that stayed in the group). The leader is reaped last.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

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
        Ok(GroupChild {
            child: cmd.spawn()?,
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
        if self.status.is_some() {
            return true;
        }
        use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
        use nix::unistd::Pid;
        let Ok(pid) = i32::try_from(self.child.id()) else {
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

    /// Waits up to `timeout` for the leader to exit (without reaping it).
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
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

    fn reap(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
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
