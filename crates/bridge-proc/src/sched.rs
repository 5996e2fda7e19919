//! How the scheduler treats the bridge's threads and the runs it starts.
//!
//! The bridge's answering thread sleeps almost all the time and runs for a few microseconds
//! per call; the threads that compete with it for a core while runs stream output (the runs
//! themselves, the threads following their output) run for milliseconds at a time. Linux's fair
//! scheduler (EEVDF, 6.6 and later) lets a task that is running finish its slice before a
//! woken task of the same weight gets the core, unless the woken task asked for a shorter slice
//! (`PREEMPT_SHORT`, 6.12 and later). [`short_slice_for_this_thread`] asks for one with
//! `sched_setattr` (`sched_runtime` under `SCHED_OTHER`, allowed without privileges): the
//! thread gets the core sooner when it wakes, and keeps its fair share (its weight, its nice
//! value, are unchanged), so nothing it waits for is starved.
//!
//! `SCHED_FLAG_RESET_ON_FORK` is set with it: threads and processes started from this thread
//! (the blocking pool, output followers, every run) start with the default slice.
//!
//! A slice only orders tasks of equal weight that are all owed time; a task that has waited
//! behind CPU-bound runs is owed more than a thread that just woke, so the answering thread
//! still waited for a scheduler tick (4 ms at 250 Hz) behind busy runs. [`start_nicer`] starts
//! a run with a higher nice value than the bridge's (as `nice -n` would): a run gets the whole
//! CPU when nothing else wants it, and gives way to the bridge, its client and the user's
//! interactive programs when they do. Raising one's own nice value needs no privilege.
//!
//! The one module of the workspace with `unsafe` code: libc calls (`sched_getscheduler`,
//! `getpriority`, `setpriority`, the raw `sched_setattr` syscall, which neither std nor nix
//! wraps), none of which takes a pointer but to a local value, and the `pre_exec` hook that
//! makes two of them in a forked child.

#![allow(unsafe_code)]

use std::io;

/// The slice asked for, in nanoseconds: 0.1 ms, the shortest the kernel accepts.
pub const SHORT_SLICE_NS: u64 = 100_000;

/// `struct sched_attr` as `sched_setattr(2)` takes it (the first version, 48 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

const SCHED_OTHER: u32 = 0;
const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

/// Asks for a [`SHORT_SLICE_NS`] slice for the calling thread under `SCHED_OTHER`, its nice
/// value kept as it is; threads and processes it starts afterwards get the default slice. An error
/// (an older kernel, a seccomp filter, another policy already set) changes nothing and is only
/// worth a debug line: the slice is a latency preference, not a requirement.
pub fn short_slice_for_this_thread() -> io::Result<()> {
    set_slice(SHORT_SLICE_NS)
}

/// The highest nice value (the lowest priority) Linux has.
pub const NICEST: u8 = 19;

/// Makes the process `cmd` starts `by` nicer than the process that starts it (capped at
/// [`NICEST`]), set between fork and exec so that every process the run starts inherits it.
/// `0` changes nothing. Only raises the nice value, which needs no privilege; were it
/// refused all the same, the run starts at the bridge's priority.
pub fn start_nicer(cmd: &mut std::process::Command, by: u8) {
    use std::os::unix::process::CommandExt;
    if by == 0 {
        return;
    }
    let by = i32::from(by.min(NICEST));
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // work is allowed: it makes two system calls (getpriority, setpriority) on the child
    // itself and touches no memory but errno, no allocation, no lock.
    unsafe {
        cmd.pre_exec(move || {
            *nix::libc::__errno_location() = 0;
            let now = nix::libc::getpriority(nix::libc::PRIO_PROCESS, 0);
            if now == -1 && *nix::libc::__errno_location() != 0 {
                return Ok(());
            }
            let nicer = (now + by).min(i32::from(NICEST));
            nix::libc::setpriority(nix::libc::PRIO_PROCESS, 0, nicer);
            Ok(())
        });
    }
}

/// The calling thread's slice as the kernel reports it (`se.slice` in
/// `/proc/thread-self/sched`), in nanoseconds; `None` where the kernel does not show it.
pub fn this_thread_slice_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/sched").ok()?;
    text.lines()
        .find(|l| l.starts_with("se.slice"))
        .and_then(|l| l.rsplit(':').next())
        .and_then(|v| v.trim().parse().ok())
}

fn set_slice(runtime: u64) -> io::Result<()> {
    // SAFETY: no memory arguments; pid 0 is the calling thread.
    let policy = unsafe { nix::libc::sched_getscheduler(0) };
    if policy != SCHED_OTHER as i32 {
        // Batch, idle or real-time, set by whoever started us: theirs to choose.
        return Err(io::Error::other(format!(
            "the thread's scheduling policy is {policy}, not SCHED_OTHER; left as it is"
        )));
    }
    // `SCHED_FLAG_KEEP_PARAMS` would keep the nice value but also skips the runtime, so the
    // thread's nice value is read and passed as it is.
    // SAFETY: getpriority has no memory arguments; `who` 0 with PRIO_PROCESS is the calling
    // thread on Linux. -1 is also a valid nice value, so errno tells an error apart.
    let nice = unsafe {
        *nix::libc::__errno_location() = 0;
        nix::libc::getpriority(nix::libc::PRIO_PROCESS, 0)
    };
    if nice == -1 && io::Error::last_os_error().raw_os_error() != Some(0) {
        return Err(io::Error::last_os_error());
    }
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: SCHED_OTHER,
        flags: SCHED_FLAG_RESET_ON_FORK,
        nice,
        priority: 0,
        runtime,
        deadline: 0,
        period: 0,
    };
    // SAFETY: `attr` is a valid `struct sched_attr` of the size it declares, alive for the
    // call; pid 0 is the calling thread; the flags argument must be 0.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_sched_setattr,
            0,
            &attr as *const SchedAttr,
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_of(pid: u32) -> i64 {
        let proc = procfs::process::Process::new(pid as i32).unwrap();
        proc.stat().unwrap().nice
    }

    #[test]
    fn a_run_starts_nicer_than_its_starter_and_never_past_nicest() {
        let own = nice_of(std::process::id());
        let started = |by: u8| {
            let mut cmd = std::process::Command::new("sleep");
            cmd.arg("30");
            start_nicer(&mut cmd, by);
            let mut child = cmd.spawn().unwrap();
            let nice = nice_of(child.id());
            child.kill().unwrap();
            child.wait().unwrap();
            nice
        };
        assert_eq!(started(0), own, "0 keeps the starter's priority");
        assert_eq!(started(5), (own + 5).min(19));
        assert_eq!(started(30), 19, "capped at the nicest value");
        assert_eq!(
            nice_of(std::process::id()),
            own,
            "the starter keeps its own"
        );
    }

    #[test]
    fn the_slice_is_short_here_and_default_in_a_thread_started_after() {
        // On a thread of its own, so the test harness's threads keep their slice.
        std::thread::spawn(|| {
            // A nice value of its own, which the slice must not reset (raising it needs no
            // privilege).
            // SAFETY: no memory arguments; 0 is the calling thread.
            assert_eq!(
                unsafe { nix::libc::setpriority(nix::libc::PRIO_PROCESS, 0, 3) },
                0
            );
            let before = this_thread_slice_ns();
            if short_slice_for_this_thread().is_err() || before.is_none() {
                // A kernel without sched_setattr's runtime for SCHED_OTHER, or one that does
                // not show the slice: nothing to compare.
                return;
            }
            assert_eq!(this_thread_slice_ns(), Some(SHORT_SLICE_NS));
            // SAFETY: no memory arguments; 0 is the calling thread.
            let nice = unsafe { nix::libc::getpriority(nix::libc::PRIO_PROCESS, 0) };
            assert_eq!(nice, 3, "the nice value is kept");
            let child = std::thread::spawn(this_thread_slice_ns).join().unwrap();
            assert_eq!(
                child, before,
                "a thread started after keeps the default slice"
            );
        })
        .join()
        .unwrap();
    }
}
