//! One attempt of a task: the runner's launch, the child in its own process group, its
//! stdout and stderr handed to [`super::output`], the wait for its exit, a stop, the deadline
//! or an overflow loop, and the teardown that leaves none of its processes behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use super::output::{enlarge_pipe, follow_output, follower, output_file, read_stream};
use super::record::Save;
use super::record::StopReason;
use super::table::{Shared, persist};
use crate::classify::ExitInfo;
use crate::command::{Capabilities, LaunchContext, PrivateTmp, TMP_VARS};
use crate::runner::backend;
use crate::spec::TaskSpec;
use crate::task::TaskId;
use bridge_proc::{self as procs, ProcId};

/// What every attempt of one task runs with.
pub(super) struct AttemptCtx<'a> {
    pub(super) shared: &'a Arc<Shared>,
    pub(super) id: TaskId,
    pub(super) spec: &'a TaskSpec,
    /// The canonical working directory (also `PWD`).
    pub(super) cwd: &'a Path,
    /// The runner's binary.
    pub(super) bin: &'a Path,
    pub(super) caps: &'a Capabilities,
    /// The task's time limit.
    pub(super) deadline: tokio::time::Instant,
}

/// How an attempt ended.
pub(super) enum AttemptEnd {
    Exited(ExitInfo),
    Stopped(StopReason),
    TimedOut,
    OverflowLoop(usize),
    SpawnFailed(String),
    /// The server a served task ran on failed it: unreachable, refused, or gone mid-task.
    ServerFailed(String),
    /// The bridge's local server could not start: the attempt runs as `opencode run`.
    NoLocalServer(String),
    /// The task's usage passed its `max_cost_usd` (what it had cost).
    OverBudget(f64),
    /// opencode would wait on a provider's limit longer than [`bridge_ledger::quota::LONGEST_WAIT`]
    /// or than the task's time left (true: the time left was the shorter).
    ProviderLimit(bridge_ledger::quota::ProviderWait, bool),
    /// An `opencode run` held by a provider's refusals (read from its log) past the task's time
    /// left (true) or past [`bridge_ledger::quota::LONGEST_WAIT`].
    ProviderStall(bridge_ledger::quota::ProviderStall, bool),
}

/// Runs attempt number `attempt` of the task to its end (see [`AttemptEnd`]).
pub(super) async fn run_attempt(
    ctx: &AttemptCtx<'_>,
    attempt: u32,
    stop_rx: &mut watch::Receiver<Option<StopReason>>,
) -> AttemptEnd {
    let AttemptCtx {
        shared,
        id,
        spec,
        cwd,
        bin,
        caps,
        deadline,
    } = *ctx;
    let cfg = &shared.config;
    let prompt_path = cfg.prompt_dir.join(format!(
        "bridge-prompt-{}-{}-{}.md",
        std::process::id(),
        id,
        attempt
    ));
    let launch_ctx = LaunchContext {
        cwd,
        program: bin,
        caps,
        default_model: cfg.default_model.as_deref(),
        base_env: &cfg.env,
        prompt_file_threshold: cfg.prompt_file_threshold,
        prompt_file_path: prompt_path,
    };
    let runner = shared.with(id, |r| r.runner).unwrap_or_default();
    let launch = backend(runner).launch(spec, &launch_ctx);
    let mut launch = match launch {
        Ok(l) => l,
        Err(e) => return AttemptEnd::SpawnFailed(e),
    };
    if let Err(e) = into_world(ctx, runner, &mut launch) {
        return AttemptEnd::SpawnFailed(e);
    }
    // From the log's end before the run starts: what it logs of a provider's refusals.
    let mut stall_watch = super::stall::StallWatch::for_attempt(runner, spec, &launch);
    let _prompt_file = match &launch.prompt_file {
        Some((path, content)) => {
            if let Some(dir) = path.parent()
                && let Err(e) = std::fs::create_dir_all(dir)
            {
                return AttemptEnd::SpawnFailed(format!(
                    "cannot create {} for the oversized prompt: {e}",
                    dir.display()
                ));
            }
            if let Err(e) = write_private(path, content) {
                return AttemptEnd::SpawnFailed(format!(
                    "cannot write the oversized prompt to {}: {e}",
                    path.display()
                ));
            }
            Some(RemoveOnDrop(path.clone()))
        }
        None => None,
    };

    let base = cfg.state_dir.as_ref().map(|d| d.join("run-tmp"));
    let tmp = match PrivateTmp::create(base, &format!("{id}-{attempt}")) {
        Ok(t) => t,
        Err(e) => return AttemptEnd::SpawnFailed(e),
    };
    let fence = match fence_for(ctx, runner, &launch, &tmp.0) {
        Ok(f) => f,
        Err(e) => return AttemptEnd::SpawnFailed(e),
    };

    let mut cmd = tokio::process::Command::new(&launch.program);
    cmd.args(&launch.args)
        .current_dir(cwd)
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(false);
    bridge_proc::sched::start_nicer(cmd.as_std_mut(), cfg.run_nice);
    let out_file = output_file();
    match out_file.as_ref().and_then(|f| f.try_clone().ok()) {
        Some(f) => cmd.stdout(f),
        None => cmd.stdout(std::process::Stdio::piped()),
    };
    for k in &launch.env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in &launch.env_set {
        cmd.env(k, v);
    }
    for k in TMP_VARS {
        cmd.env(k, &tmp.0);
    }
    // Last, so the run is confined from its first instruction (see `bridge_fence`).
    fence.apply_to(cmd.as_std_mut());
    shared.with(id, |r| {
        let fenced = fence.confinement().to_string();
        r.begin_attempt(attempt, fenced, cfg.output_cap, shared.writer.is_none());
    });
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return AttemptEnd::SpawnFailed(format!(
                "cannot start {}: {e}",
                launch.program.display()
            ));
        }
    };
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    // The child is not reaped until we wait on it, so its /proc entry is there.
    let root = ProcId::of(pid).unwrap_or(ProcId { pid, start_time: 0 });
    shared.with(id, |r| {
        r.root = Some(root);
        persist(shared, r, Save::Record);
    });

    if let Some(mut stdin) = child.stdin.take() {
        let bytes = launch.stdin.clone();
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        });
    }
    let (out_done, out_done_rx) = tokio::sync::watch::channel(false);
    // Set when the readers took too long to drain: the output follower stops (a task on the
    // blocking pool cannot be aborted).
    let abandon = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let out_reader = match (out_file, child.stdout.take()) {
        (_, Some(pipe)) => {
            enlarge_pipe(&pipe);
            Some(tokio::spawn(read_stream(
                Arc::clone(shared),
                id,
                pipe,
                true,
            )))
        }
        (Some(file), None) => {
            let (shared, abandon) = (Arc::clone(shared), Arc::clone(&abandon));
            follower(move || follow_output(&shared, id, &file, out_done_rx, &abandon))
        }
        (None, None) => None,
    };
    let err_reader = child
        .stderr
        .take()
        .map(|s| tokio::spawn(read_stream(Arc::clone(shared), id, s, false)));

    let mut known: BTreeSet<ProcId> = BTreeSet::new();
    let mut ticks: u64 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop_reason: Option<AttemptEnd>;
    let mut exit: Option<ExitInfo> = None;
    loop {
        tokio::select! {
            res = child.wait() => {
                exit = Some(match res {
                    Ok(st) => {
                        use std::os::unix::process::ExitStatusExt;
                        ExitInfo { code: st.code(), signal: st.signal() }
                    }
                    Err(_) => ExitInfo::default(),
                });
                stop_reason = None;
                break;
            }
            _ = stop_rx.changed() => {
                let reason = (*stop_rx.borrow()).unwrap_or(StopReason::Cancel);
                stop_reason = Some(AttemptEnd::Stopped(reason));
                break;
            }
            _ = tokio::time::sleep_until(deadline) => {
                // Held by a provider at the time limit: its limit, not the time, is the cause.
                stop_reason = Some(
                    super::stall::held_end(shared, id, true)
                        .map_or(AttemptEnd::TimedOut, |s| AttemptEnd::ProviderStall(s, true)),
                );
                break;
            }
            _ = tick.tick() => {
                ticks += 1;
                // Keep the registry current: the session id as soon as it is known, the output
                // every few seconds while events arrive.
                shared.with(id, |r| {
                    let session = r.summary.session_id().is_some() && !r.persisted_session;
                    let output = ticks.is_multiple_of(25) && r.summary.events() != r.persisted_events;
                    if session || output {
                        r.persisted_session = r.summary.session_id().is_some();
                        r.persisted_events = r.summary.events();
                        persist(shared, r, if output { Save::WithOutput } else { Save::Record });
                    }
                });
                // A walk of /proc: on the blocking pool, not on the thread that answers calls.
                let mut k = known.clone();
                if let Ok(k) = tokio::task::spawn_blocking(move || {
                    procs::refresh_known_recent(root, &mut k, Duration::from_millis(150));
                    k
                })
                .await
                {
                    known = k;
                }
                // Past its max_cost_usd: every attempt so far counts (unknown cost at its
                // Claude-equivalent), checked as each step's cost arrives.
                if let Some(max) = spec.max_cost_usd {
                    let spent = shared
                        .with(id, |r| r.task_usage().budget_cost())
                        .unwrap_or(0.0);
                    if spent > max {
                        stop_reason = Some(AttemptEnd::OverBudget(spent));
                        break;
                    }
                }
                if let Some(watch) = stall_watch.as_mut()
                    && ticks.is_multiple_of(10)
                {
                    watch.poll(shared, id).await;
                    if let Some(stall) = super::stall::held_end(shared, id, false) {
                        stop_reason = Some(AttemptEnd::ProviderStall(stall, false));
                        break;
                    }
                }
                let overflows = shared.with(id, |r| r.summary.overflows()).unwrap_or(0);
                if overflows >= cfg.overflow_limit.max(1) {
                    stop_reason = Some(AttemptEnd::OverflowLoop(overflows));
                    break;
                }
            }
        }
    }

    if matches!(stop_reason, Some(AttemptEnd::Stopped(StopReason::Shutdown)))
        && cfg.on_exit == crate::spec::OnExit::Leave
    {
        // Left running at the bridge's stop: its process group goes on (its stdout is a file,
        // its prompt went on stdin); its temporary directory and prompt file stay with it, and
        // its record keeps its pid for the next bridge.
        std::mem::forget(tmp);
        std::mem::forget(_prompt_file);
        let _ = out_done.send(true);
        return AttemptEnd::Stopped(StopReason::Shutdown);
    }
    if exit.is_none() {
        // Stop the whole tree, then reap the root.
        procs::terminate_tree(root, &mut known, cfg.kill_grace).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    }
    // Let the readers drain what is left; a descendant holding the pipes open must not keep
    // us waiting.
    let _ = out_done.send(true);
    for reader in [out_reader, err_reader].into_iter().flatten() {
        let abort = reader.abort_handle();
        if tokio::time::timeout(Duration::from_millis(1500), reader)
            .await
            .is_err()
        {
            abandon.store(true, std::sync::atomic::Ordering::Relaxed);
            abort.abort();
        }
    }
    // Whatever the run left behind (background commands, escapees) goes too.
    procs::refresh_known(root, &mut known);
    if known.iter().any(ProcId::is_alive) {
        procs::terminate_tree(root, &mut known, cfg.kill_grace).await;
    }
    procs::sweep(&known, Duration::from_secs(2)).await;
    shared.with(id, |r| r.root = None);
    match stop_reason {
        Some(end) => end,
        None => AttemptEnd::Exited(exit.unwrap_or_default()),
    }
}

/// The kernel fence of one attempt ([`bridge_fence::for_run`]): the runner, its binary, the
/// project the task works on (written only by editing agents), its temporary directory, an
/// oversized prompt's file, and the environment the run will see.
pub(super) fn fence_for(
    ctx: &AttemptCtx<'_>,
    runner: crate::runner::Runner,
    launch: &crate::command::Launch,
    tmp: &Path,
) -> Result<bridge_fence::Fence, String> {
    let world = world_for(ctx, runner, launch, tmp);
    bridge_fence::Fence::prepare(&bridge_fence::for_run(&world), ctx.shared.config.sandbox)
}

/// The private world of this task's project and access ([`bridge_fence::World`]), under the
/// bridge's state directory (or, for a supervisor without one, a private directory of this
/// user's in the system's temp dir).
pub(super) fn world_of(ctx: &AttemptCtx<'_>) -> bridge_fence::World {
    let project = project_for(&ctx.shared.config, ctx.id, ctx.cwd);
    let state = (ctx.shared.config.state_dir.clone())
        .unwrap_or_else(bridge_fence::world::fallback_state_dir);
    bridge_fence::World::of(&state, &project.top, !ctx.spec.read_only)
}

/// Prepares the task's world and gives the launch its environment: only what the runner needs
/// of the bridge's ([`crate::command::confine_env`]) and the world's directories.
pub(super) fn into_world(
    ctx: &AttemptCtx<'_>,
    runner: crate::runner::Runner,
    launch: &mut crate::command::Launch,
) -> Result<(), String> {
    let kind = backend(runner).traits().fence;
    let world = world_of(ctx);
    world.prepare(kind, &user_dirs(&launch.env_set))?;
    let cfg = &ctx.shared.config;
    let model = ctx.spec.model.as_deref().or(cfg.default_model.as_deref());
    crate::command::confine_env(launch, kind, model, &cfg.pass_env, &world.env(kind));
    Ok(())
}

/// The user's own runner directories, where a run would find them without a world: the
/// bridge's environment with the configured variables (`set`) over it (to seed worlds).
fn user_dirs(set: &[(String, String)]) -> bridge_fence::UserDirs {
    bridge_fence::UserDirs::from_lookup(|k| {
        let found = set.iter().rev().find(|(n, _)| n == k);
        found
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(k).ok())
    })
}

/// What [`bridge_fence::for_run`] needs to know about a run of this attempt (also the warm
/// server a served task runs on: the same project, access and environment).
pub(super) fn world_for(
    ctx: &AttemptCtx<'_>,
    runner: crate::runner::Runner,
    launch: &crate::command::Launch,
    tmp: &Path,
) -> bridge_fence::RunWorld {
    let project = project_for(&ctx.shared.config, ctx.id, ctx.cwd);
    let kind = backend(runner).traits().fence;
    let credentials = world_of(ctx).credentials(kind, &user_dirs(&ctx.shared.config.env));
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !launch.env_remove.contains(k))
        .collect();
    env.extend(launch.env_set.iter().cloned());
    let mut extra_read = project.read;
    extra_read.extend(launch.prompt_file.as_ref().map(|(p, _)| p.clone()));
    bridge_fence::RunWorld {
        kind,
        program: launch.program.clone(),
        project: project.top,
        editing: !ctx.spec.read_only,
        tmp: tmp.to_path_buf(),
        extra_read,
        extra_write: project.write,
        env,
        credentials,
    }
}

/// The project task `id`'s runs in `cwd` work on ([`bridge_fence::project_of`]): an isolated
/// task's tree is its worktree, with the git directories the bridge recorded when it made it;
/// any other task's is inside the root.
pub(super) fn project_for(
    cfg: &crate::spec::SupervisorConfig,
    id: TaskId,
    cwd: &Path,
) -> bridge_fence::Project {
    let worktrees = cfg
        .state_dir
        .as_deref()
        .map(bridge_isolation::worktree::root);
    let (boundary, own) = match (worktrees.as_deref(), cfg.state_dir.as_deref()) {
        (Some(w), Some(state)) if cwd.starts_with(w) => (
            w.join(id.to_string()),
            bridge_isolation::worktree::load(state, id).and_then(|i| i.own()),
        ),
        _ => (
            cfg.root.canonicalize().unwrap_or_else(|_| cfg.root.clone()),
            None,
        ),
    };
    bridge_fence::project_of(cwd, &boundary, own.as_ref())
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content.as_bytes())
}
