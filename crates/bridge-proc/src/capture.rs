//! Bounded capture: run a short-lived command in its own process group, with a timeout, and
//! keep at most so many bytes of its stdout and stderr.
//!
//! Past a cap the rest is read and dropped, so the child never blocks on a full pipe. On timeout
//! the whole group is killed and the leader reaped; after a normal exit the group is killed too,
//! because anything the leader left in it would keep the pipes open.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::group::GroupChild;

/// How many bytes of each stream are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureLimits {
    /// Bytes of stdout kept; [`Captured::stdout_over`] says whether there were more.
    pub stdout_bytes: u64,
    /// Bytes of stderr kept (the rest is dropped silently).
    pub stderr_bytes: u64,
}

/// What a finished command printed, and how it ended.
#[derive(Debug)]
pub struct Captured {
    /// The leader's exit status (`None` if it could not be reaped).
    pub status: Option<ExitStatus>,
    /// Stdout, at most [`CaptureLimits::stdout_bytes`].
    pub stdout: Vec<u8>,
    /// True when stdout was longer than its cap.
    pub stdout_over: bool,
    /// Stderr, at most [`CaptureLimits::stderr_bytes`].
    pub stderr: Vec<u8>,
}

/// Why a capture has no result.
#[derive(Debug)]
pub enum CaptureError {
    /// The command could not be started.
    Spawn(std::io::Error),
    /// It did not finish (or its stdout did not close) within the timeout; it was killed with
    /// its group and reaped.
    TimedOut,
}

/// Runs `cmd` (stdin closed, stdout and stderr piped) as the leader of a new process group for
/// at most `timeout`, keeping what `limits` allow of its output. The group is killed and the
/// leader reaped on every path.
pub fn run_capture(
    cmd: &mut Command,
    timeout: Duration,
    limits: CaptureLimits,
) -> Result<Captured, CaptureError> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = GroupChild::spawn(cmd).map_err(CaptureError::Spawn)?;
    let stdout = child.child_mut().stdout.take().expect("stdout is piped");
    let stderr = child.child_mut().stderr.take().expect("stderr is piped");
    let out_rx = read_bounded(stdout, limits.stdout_bytes);
    let err_rx = read_bounded(stderr, limits.stderr_bytes);
    if !child.wait_exit(timeout.saturating_sub(started.elapsed())) {
        child.kill_and_reap();
        return Err(CaptureError::TimedOut);
    }
    // The leader exited; anything it left in its group would keep the pipes open.
    let status = child.kill_and_reap();
    let left = timeout
        .saturating_sub(started.elapsed())
        .max(Duration::from_millis(500));
    let (stdout, stdout_over) = out_rx
        .recv_timeout(left)
        .map_err(|_| CaptureError::TimedOut)?;
    let (stderr, _) = err_rx.recv_timeout(left).unwrap_or_default();
    Ok(Captured {
        status,
        stdout,
        stdout_over,
        stderr,
    })
}

/// Reads `r` to its end on a thread: the first `cap` bytes are sent back with whether there
/// were more; the rest is drained and dropped.
fn read_bounded(mut r: impl Read + Send + 'static, cap: u64) -> mpsc::Receiver<(Vec<u8>, bool)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut r).take(cap.saturating_add(1)).read_to_end(&mut buf);
        let over = buf.len() as u64 > cap;
        if over {
            buf.truncate(cap as usize);
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        }
        let _ = tx.send((buf, over));
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    const LIMITS: CaptureLimits = CaptureLimits {
        stdout_bytes: 10,
        stderr_bytes: 4,
    };

    #[test]
    fn output_is_kept_up_to_its_cap_and_the_rest_drained() {
        let c = run_capture(
            &mut sh("printf 0123456789abc; printf errors >&2; exit 3"),
            Duration::from_secs(10),
            LIMITS,
        )
        .unwrap();
        assert_eq!(c.stdout, b"0123456789");
        assert!(c.stdout_over);
        assert_eq!(c.stderr, b"erro");
        assert_eq!(c.status.and_then(|s| s.code()), Some(3));
        // A flood larger than any pipe buffer does not block the child.
        let c = run_capture(
            &mut sh("head -c 3000000 /dev/zero"),
            Duration::from_secs(10),
            LIMITS,
        )
        .unwrap();
        assert!(c.stdout_over && c.status.is_some_and(|s| s.success()));
        let c = run_capture(&mut sh("printf ok"), Duration::from_secs(10), LIMITS).unwrap();
        assert_eq!((c.stdout.as_slice(), c.stdout_over), (&b"ok"[..], false));
    }

    #[test]
    fn a_slow_command_times_out_and_a_missing_one_does_not_start() {
        let t = Instant::now();
        let r = run_capture(&mut sh("sleep 30"), Duration::from_millis(200), LIMITS);
        assert!(matches!(r, Err(CaptureError::TimedOut)), "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(5));
        // A descendant left in the group holding stdout open is killed with it.
        let t = Instant::now();
        let r = run_capture(
            &mut sh("sleep 30 & echo hi"),
            Duration::from_secs(10),
            LIMITS,
        );
        assert_eq!(r.unwrap().stdout, b"hi\n");
        assert!(t.elapsed() < Duration::from_secs(5));
        let r = run_capture(
            &mut Command::new("/nonexistent/binary"),
            Duration::from_secs(1),
            LIMITS,
        );
        assert!(matches!(r, Err(CaptureError::Spawn(_))), "{r:?}");
    }
}
