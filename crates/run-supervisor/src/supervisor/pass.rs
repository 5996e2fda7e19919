//! The pass a task makes once it is accepted (or adopted), its stages called in order from
//! here: 2 its world (an isolated task's worktree; the tree, footprint and protected paths
//! looked at before), 3 and 4 the engine's attempts and their follow-up ([`attempt`]), 5 its
//! output (followed during the attempts), 6 the audit and its changes ([`audited`]), 7 the
//! ledger ([`ledger`]). Admission, stage 1, is [`admit`](super::admit)'s, before this.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use super::ledger::{finish, release_reservation};
use super::record::StopReason;
use super::table::Shared;
use super::{attempt, audited, child, isolated};
use crate::classify::{Failure, FailureKind};
use crate::spec::TaskSpec;
use crate::task::{TaskId, TaskState};
use bridge_isolation::changes::{self, GitSnapshot};
use bridge_isolation::footprint::{self, Footprint};

/// A task's pass from its world to its end; `cwd` is where it works, `bin` what it runs.
pub(super) async fn run_task(
    shared: Arc<Shared>,
    id: TaskId,
    spec: TaskSpec,
    cwd: PathBuf,
    bin: PathBuf,
    stop_rx: watch::Receiver<Option<StopReason>>,
) {
    // An isolated task: its worktree first (the task's cwd is in it).
    let state_dir = shared
        .registry
        .as_ref()
        .and(shared.config.state_dir.clone());
    let (sp, dir) = (spec.clone(), state_dir.clone());
    let made = tokio::task::spawn_blocking(move || isolated::before_run(&sp, dir.as_deref(), id))
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
    if let Err(e) = made {
        let advice = "fix what the message names, or start the task without isolation";
        let failure = Failure::with_advice(FailureKind::Spawn, e, advice);
        finish(&shared, id, TaskState::Failed, Some(failure)).await;
        return;
    }
    // Look at the git tree before and after: an editing agent's changes are listed, a read-only
    // agent's are a policy violation (the audit).
    // A task on a remote server changes that server's tree, not this one: its changes come
    // from its tool calls.
    // So does a task adopted from a bridge that is gone: its tree changed before this bridge
    // looked.
    let resumed = shared.with(id, |r| r.resume).unwrap_or(false);
    let remote = resumed
        || spec
            .server
            .as_deref()
            .is_some_and(|s| s.trim() != "local" && !s.trim().is_empty());
    let before = if remote {
        None
    } else {
        let dir = cwd.clone();
        tokio::task::spawn_blocking(move || GitSnapshot::take(&dir))
            .await
            .ok()
            .flatten()
    };
    let read_only = spec.read_only;
    // A read-only run also must not touch what git status does not show: `.git/`, ignored
    // paths, a tree outside git.
    let footprint = if read_only && !remote {
        let dir = cwd.clone();
        let cfg = &shared.config;
        let var = |k: &str| {
            spec.env
                .iter()
                .chain(cfg.env.iter())
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .or_else(|| std::env::var(k).ok())
        };
        let mut skip = footprint::runner_dirs(var);
        skip.extend(cfg.state_dir.clone());
        skip.push(cfg.prompt_dir.clone());
        tokio::task::spawn_blocking(move || Footprint::take(&dir, &skip))
            .await
            .ok()
    } else {
        None
    };
    // An editing run in the caller's checkout must leave its protected paths as they were
    // (an isolated task's worktree is the caller's to apply, and `apply` holds them back).
    let protected =
        if !read_only && !remote && spec.isolation == bridge_isolation::worktree::Isolation::None {
            let top = child::project_for(&shared.config, id, &cwd).top;
            tokio::task::spawn_blocking(move || bridge_isolation::protect::Protected::take(&top))
                .await
                .ok()
        } else {
            None
        };
    let expected = audited::Expected::of(&spec);
    let dir = cwd.clone();
    let (state, failure) = attempt::run_task_inner(&shared, id, spec, cwd, bin, stop_rx).await;
    if shared.with(id, |r| r.detached).unwrap_or(false) {
        // Left running at the bridge's stop (its process, or its turn on a server): recorded as
        // it is, not finished.
        let written = shared
            .with(id, |r| {
                let version = shared.version();
                shared.writer.as_ref().map(|w| {
                    w.write_acked(
                        r.record(TaskState::Running, version.as_deref()),
                        Some(r.output()),
                    )
                })
            })
            .flatten();
        if let Some(ack) = written {
            let _ = ack.await;
        }
        // Its reservation goes with this bridge: the bridge that adopts it counts what it
        // uses from then on.
        release_reservation(&shared, id).await;
        shared.with(id, |r| r.done.send_replace(true));
        return;
    }
    // Put back what the run changed of them first, so the changed files below are what stays.
    let restored = match protected {
        Some(p) => tokio::task::spawn_blocking(move || p.restore())
            .await
            .unwrap_or_default(),
        None => Default::default(),
    };
    let mut tree = None;
    let mut disk = None;
    if read_only {
        tree = match before {
            Some(snap) => tokio::task::spawn_blocking(move || snap.changes_since())
                .await
                .ok()
                .flatten(),
            None => None,
        };
        disk = match footprint {
            Some(fp) => tokio::task::spawn_blocking(move || fp.changes_since())
                .await
                .ok(),
            None => None,
        };
    } else {
        let calls = shared.with(id, |r| r.all_tool_calls()).unwrap_or_default();
        let changes = tokio::task::spawn_blocking(move || match before {
            Some(snap) => snap.changes_since(),
            None => Some(changes::from_tool_calls(&calls, &dir)),
        })
        .await
        .ok()
        .flatten();
        shared.with(id, |r| r.changes = changes);
    }
    // An isolated task: its patch, before it is shown finished.
    let collect = move || isolated::after_run(state_dir.as_deref(), id);
    let _ = tokio::task::spawn_blocking(collect).await;
    let (state, failure) =
        audited::settle(&shared, id, &expected, state, failure, tree, disk).await;
    let (state, failure) = audited::protected(state, failure, &restored);
    if restored.installed > 0 {
        shared.with(id, |r| {
            let line = format!(
                "protected paths: removed what opencode installed in .opencode ({} entries)",
                restored.installed
            );
            r.audit = Some(match r.audit.take() {
                Some(a) => format!("{a}; {line}"),
                None => line,
            });
        });
    }
    finish(&shared, id, state, failure).await;
}
