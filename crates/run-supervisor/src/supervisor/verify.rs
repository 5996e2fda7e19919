//! The caller's verify command after an agent's turn: `sh -c <command>` in the task's cwd,
//! inside the same fence and world as the task's runs (the launch an attempt of this task
//! would get, [`into_world`], and its fence, [`fence_for`]), in a process group of its own,
//! bounded by the task's deadline and stopped by a cancel like a run. Its output goes to an
//! unnamed file; only its end is kept ([`crate::verify::output_tail`]).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::watch;

use super::child::{AttemptCtx, fence_for, into_world};
use super::record::StopReason;
use crate::command::{LaunchContext, PrivateTmp, TMP_VARS};
use crate::runner::backend;
use crate::verify::VerifyOutcome;
use bridge_proc::{self as procs, ProcId};

/// Output past this many bytes stops the command (a flood must not fill the disk).
const MAX_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;
/// Bytes of the output's end read back.
const TAIL_BYTES: u64 = 64 * 1024;

/// How a verify run ended.
pub(super) enum VerifyEnd {
    /// It exited (or was killed by a signal of its own): the outcome and its output's end.
    Done(VerifyOutcome, String),
    /// The task's time limit came first.
    TimedOut,
    /// The task was cancelled or the bridge stops.
    Stopped(StopReason),
    /// It could not be started (the fence, the world, the shell).
    SpawnFailed(String),
}

/// Runs `command` for the `runs`-th time (1 for the first).
pub(super) async fn run_verify(
    ctx: &AttemptCtx<'_>,
    command: &str,
    runs: u32,
    stop_rx: &mut watch::Receiver<Option<StopReason>>,
) -> VerifyEnd {
    let shared = ctx.shared;
    let cfg = &shared.config;
    let id = ctx.id;
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let launch_ctx = LaunchContext {
        cwd: ctx.cwd,
        program: ctx.bin,
        caps: ctx.caps,
        default_model: cfg.default_model.as_deref(),
        base_env: &cfg.env,
        // No prompt file: the command reads no prompt.
        prompt_file_threshold: usize::MAX,
        prompt_file_path: std::path::PathBuf::new(),
    };
    let mut launch = match backend(runner).launch(ctx.spec, &launch_ctx) {
        Ok(l) => l,
        Err(e) => return VerifyEnd::SpawnFailed(e),
    };
    if let Err(e) = into_world(ctx, runner, &mut launch) {
        return VerifyEnd::SpawnFailed(e);
    }
    let base = cfg.state_dir.as_ref().map(|d| d.join("run-tmp"));
    let tmp = match PrivateTmp::create(base, &format!("{id}-verify-{runs}")) {
        Ok(t) => t,
        Err(e) => return VerifyEnd::SpawnFailed(e),
    };
    let fence = match fence_for(ctx, runner, &launch, &tmp.0) {
        Ok(f) => f,
        Err(e) => return VerifyEnd::SpawnFailed(e),
    };
    let Some(out) = super::output::output_file() else {
        return VerifyEnd::SpawnFailed("no file for the verify command's output".into());
    };
    let (Ok(stdout), Ok(stderr)) = (out.try_clone(), out.try_clone()) else {
        return VerifyEnd::SpawnFailed("no file for the verify command's output".into());
    };
    // The caller's string is the script of `sh -c`, never an option of any program.
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(ctx.cwd)
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(false);
    bridge_proc::sched::start_nicer(cmd.as_std_mut(), cfg.run_nice);
    for k in &launch.env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in &launch.env_set {
        cmd.env(k, v);
    }
    cmd.env("PWD", ctx.cwd);
    for k in TMP_VARS {
        cmd.env(k, &tmp.0);
    }
    fence.apply_to(cmd.as_std_mut());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return VerifyEnd::SpawnFailed(format!("cannot start /bin/sh: {e}")),
    };
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let root = ProcId::of(pid).unwrap_or(ProcId { pid, start_time: 0 });
    let mut known: BTreeSet<ProcId> = BTreeSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut status = None;
    let mut stopped = None;
    let mut flooded = false;
    loop {
        tokio::select! {
            res = child.wait() => {
                status = res.ok();
                break;
            }
            _ = stop_rx.changed() => {
                stopped = Some(VerifyEnd::Stopped((*stop_rx.borrow()).unwrap_or(StopReason::Cancel)));
                break;
            }
            _ = tokio::time::sleep_until(ctx.deadline) => {
                stopped = Some(VerifyEnd::TimedOut);
                break;
            }
            _ = tick.tick() => {
                let mut k = known.clone();
                if let Ok(k) = tokio::task::spawn_blocking(move || {
                    procs::refresh_known_recent(root, &mut k, Duration::from_millis(150));
                    k
                })
                .await
                {
                    known = k;
                }
                if out.metadata().map(|m| m.len()).unwrap_or(0) > MAX_OUTPUT_BYTES {
                    flooded = true;
                    break;
                }
            }
        }
    }
    if status.is_none() {
        procs::terminate_tree(root, &mut known, cfg.kill_grace).await;
        status = tokio::time::timeout(Duration::from_secs(5), child.wait())
            .await
            .ok()
            .and_then(Result::ok);
    }
    // What it left behind (background jobs) goes too.
    procs::refresh_known(root, &mut known);
    if known.iter().any(ProcId::is_alive) {
        procs::terminate_tree(root, &mut known, cfg.kill_grace).await;
    }
    procs::sweep(&known, Duration::from_secs(2)).await;
    drop(tmp);
    if let Some(end) = stopped {
        return end;
    }
    let mut tail = crate::verify::output_tail(&read_tail(&out));
    if flooded {
        tail.push_str(&format!(
            "\n[the command was stopped: its output passed {} MB]",
            MAX_OUTPUT_BYTES / (1024 * 1024)
        ));
    }
    use std::os::unix::process::ExitStatusExt;
    let (exit, signal) = match status {
        Some(st) => (st.code(), st.signal()),
        None => (None, None),
    };
    let outcome = VerifyOutcome {
        passed: exit == Some(0) && !flooded,
        exit,
        signal,
        runs,
    };
    VerifyEnd::Done(outcome, tail)
}

/// The last [`TAIL_BYTES`] of the output file.
fn read_tail(f: &std::fs::File) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(TAIL_BYTES);
    let mut buf = vec![0u8; (len - start) as usize];
    let mut read = 0;
    while read < buf.len() {
        match f.read_at(&mut buf[read..], start + read as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
    buf.truncate(read);
    buf
}
