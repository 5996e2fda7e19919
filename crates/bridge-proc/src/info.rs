//! What `/proc` says about one process for a process table: parent, state, start time,
//! command line, working directory, and how long it has run.
//!
//! The age of a process is computed one way only, by [`BootClock::age`]: seconds since boot
//! now (`/proc/uptime`) minus its start time (clock ticks after boot, field 22 of
//! `/proc/<pid>/stat`) over the clock-tick rate. Both are counted from boot, so a change of
//! the wall clock does not change an age.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Seconds since boot when it was read, and clock ticks per second: turns a start time into an
/// age.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootClock {
    uptime_s: f64,
    ticks_per_s: f64,
}

impl BootClock {
    /// The clock of this machine's `/proc`.
    pub fn now() -> Option<BootClock> {
        BootClock::in_root(Path::new("/proc"))
    }

    /// The clock of a procfs mounted at `proc_root` (tests use a synthetic tree): its
    /// `uptime` file, and this machine's tick rate.
    pub fn in_root(proc_root: &Path) -> Option<BootClock> {
        let s = std::fs::read_to_string(proc_root.join("uptime")).ok()?;
        Some(BootClock {
            uptime_s: s.split_whitespace().next()?.parse().ok()?,
            ticks_per_s: procfs::ticks_per_second().max(1) as f64,
        })
    }

    /// The age of a process that started `start_time` clock ticks after boot (zero for a
    /// start time after the clock was read, or for figures from `/proc` that make no time).
    pub fn age(&self, start_time: u64) -> Duration {
        let secs = (self.uptime_s - start_time as f64 / self.ticks_per_s).max(0.0);
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::ZERO)
    }

    /// [`BootClock::age`] with no clock: zero when `/proc/uptime` could not be read.
    pub fn age_or_zero(clock: Option<&BootClock>, start_time: u64) -> Duration {
        clock.map(|c| c.age(start_time)).unwrap_or_default()
    }
}

/// One process as `/proc` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcInfo {
    /// Process id.
    pub pid: i32,
    /// Parent process id.
    pub ppid: i32,
    /// State letter (`R`, `S`, `Z`, ...).
    pub state: char,
    /// Start time, in clock ticks after boot.
    pub start_time: u64,
    /// The command line (empty for a kernel thread or a zombie).
    pub cmdline: Vec<String>,
    /// The working directory, when readable.
    pub cwd: Option<PathBuf>,
    /// Time since it started ([`BootClock::age`]; zero when the clock cannot be read).
    pub elapsed: Duration,
}

impl ProcInfo {
    /// Reads `/proc/<pid>`; `None` when the process is gone or its `stat` is unreadable (an
    /// unreadable command line is empty, an unreadable cwd `None`).
    pub fn of(pid: i32) -> Option<ProcInfo> {
        let p = procfs::process::Process::new(pid).ok()?;
        let stat = p.stat().ok()?;
        Some(ProcInfo {
            pid,
            ppid: stat.ppid,
            state: stat.state,
            start_time: stat.starttime,
            cmdline: p.cmdline().unwrap_or_default(),
            cwd: p.cwd().ok(),
            elapsed: BootClock::age_or_zero(BootClock::now().as_ref(), stat.starttime),
        })
    }

    /// Whether it is a zombie (ended, not yet reaped).
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_is_uptime_minus_the_start_time() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("uptime"), "65.00 100.00\n").unwrap();
        let clock = BootClock::in_root(dir.path()).unwrap();
        let ticks = procfs::ticks_per_second() as f64;
        let want = 65.0 - 500.0 / ticks;
        assert!((clock.age(500).as_secs_f64() - want).abs() < 0.01);
        assert_eq!(clock.age((66.0 * ticks) as u64), Duration::ZERO);
        assert_eq!(BootClock::age_or_zero(None, 500), Duration::ZERO);
        std::fs::write(dir.path().join("uptime"), "garbage\n").unwrap();
        assert_eq!(BootClock::in_root(dir.path()), None);
    }

    #[test]
    fn this_process_reads_as_itself() {
        let me = ProcInfo::of(std::process::id() as i32).expect("our own /proc entry");
        assert_eq!(me.ppid, std::os::unix::process::parent_id() as i32);
        assert!(!me.is_zombie());
        assert_eq!(Some(me.start_time), crate::start_time(me.pid));
        assert_eq!(me.cwd, std::env::current_dir().ok());
        assert!(!me.cmdline.is_empty());
        // Started before now, and not before boot.
        let clock = BootClock::now().unwrap();
        assert!(me.elapsed <= clock.age(0));
    }
}
