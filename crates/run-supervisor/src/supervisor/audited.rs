//! The post-run audit where a task ends ([`bridge_isolation::audit`]): what the task asked, read when it is
//! accepted; what its session used, read through the configured
//! [`SessionReader`](bridge_isolation::audit::SessionReader) on the blocking pool once its last attempt
//! ended; and the task's final state and failure, settled from both. Fail closed: a proven
//! mismatch turns a success into a failure; an unreadable session does not fail the task.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use super::table::Shared;
use crate::classify::Failure;
use crate::runner::backend;
use crate::spec::TaskSpec;
use crate::task::{TaskId, TaskState};
use bridge_isolation::audit::{self, Asked, Denied};
use bridge_isolation::changes::ChangedFiles;
use bridge_isolation::footprint::Touched;

/// What a task asked for, kept from its spec for the audit at its end.
#[derive(Debug, Clone)]
pub(super) struct Expected {
    agent: String,
    read_only: bool,
    denied: Denied,
}

impl Expected {
    pub(super) fn of(spec: &TaskSpec) -> Expected {
        Expected {
            agent: spec.agent.clone(),
            read_only: spec.read_only,
            denied: spec.denied,
        }
    }
}

/// Audits task `id` after its last attempt (`state`, `failure`: how the attempts ended;
/// `tree`: what changed in the git tree while a read-only agent ran; `disk`: what changed in
/// its footprint, `.git/`, ignored paths or a tree outside git) and returns the state and
/// failure it ends with. Sets the task's audit line. Runs that are not opencode's (`claude -p`)
/// have no session to audit; their read-only tree is still checked.
pub(super) async fn settle(
    shared: &Arc<Shared>,
    id: TaskId,
    expected: &Expected,
    state: TaskState,
    failure: Option<Failure>,
    tree: Option<ChangedFiles>,
    disk: Option<Touched>,
) -> (TaskState, Option<Failure>) {
    let Some((opencode, session, model, since, calls)) = shared.with(id, |r| {
        (
            backend(r.runner).traits().learns_session_from_store,
            r.summary
                .session_id()
                .clone()
                .or_else(|| r.rec.continues.clone()),
            r.rec.model.clone(),
            UNIX_EPOCH + Duration::from_millis(r.rec.accepted_ms),
            r.all_tool_calls(),
        )
    }) else {
        return (state, failure);
    };
    if !opencode {
        let found = expected
            .read_only
            .then(|| audit::read_only_tree(&expected.agent, tree.as_ref(), disk.as_ref()))
            .flatten()
            .map(Failure::from);
        if found.is_some() && tree.as_ref().is_some_and(|t| !t.files.is_empty()) {
            shared.with(id, |r| r.changes = tree);
        }
        return match (state, found) {
            (TaskState::Succeeded, Some(f)) => (TaskState::Failed, Some(f)),
            (state, _) => (state, failure),
        };
    }
    let reader = shared.config.session_reader.clone();
    let used = match (reader, session) {
        // A cancelled run (or one stopped by the bridge's shutdown) is not read: it did not
        // end on its own, and a shutdown should not wait for the store.
        _ if state == TaskState::Cancelled => Err("the task was cancelled".to_owned()),
        (None, _) => Err("this bridge has no session reader".to_owned()),
        (Some(_), None) => Err("the run named no session".to_owned()),
        (Some(reader), Some(sid)) => tokio::task::spawn_blocking(move || reader.read(&sid, since))
            .await
            .unwrap_or_else(|e| Err(format!("the session read failed: {e}"))),
    };
    let asked = Asked {
        agent: &expected.agent,
        model: model.as_deref(),
        read_only: expected.read_only,
        denied: expected.denied,
    };
    let found = audit::audit(
        &asked,
        used.as_ref().map_err(String::as_str),
        &calls,
        tree.as_ref(),
        disk.as_ref(),
    );
    let mut note = found.note;
    let (state, failure) = match (state, found.failure.map(Failure::from)) {
        (TaskState::Succeeded, Some(f)) => (TaskState::Failed, Some(f)),
        (state, Some(f)) => {
            note.push_str(&format!("; also: {}", f.message));
            (state, failure)
        }
        (state, None) => (state, failure),
    };
    shared.with(id, |r| {
        r.audit = Some(note);
        // A read-only agent's changes are named in its result (they are the violation).
        if expected.read_only && tree.as_ref().is_some_and(|t| !t.files.is_empty()) {
            r.changes = tree;
        }
    });
    (state, failure)
}

/// Advice of a task that changed protected paths.
const PROTECTED_ADVICE: &str = "the bridge put them back as they were; if the change was wanted, make it yourself after reading it, or run the task with isolation \"worktree\" and apply with allow_protected naming those paths";

/// The end of an editing task whose run changed protected paths of its project (`restored`,
/// already put back): a success becomes a failure (kind `agent`) naming every path; another
/// failure keeps its kind and names them too.
pub(super) fn protected(
    state: TaskState,
    failure: Option<Failure>,
    restored: &bridge_isolation::protect::Restored,
) -> (TaskState, Option<Failure>) {
    let Some(message) = restored.message() else {
        return (state, failure);
    };
    match (state, failure) {
        (TaskState::Succeeded, _) | (_, None) => (
            TaskState::Failed,
            Some(Failure::with_advice(
                crate::classify::FailureKind::Agent,
                message,
                PROTECTED_ADVICE,
            )),
        ),
        (state, Some(f)) => {
            let also = format!("{}; also: {message}", f.message);
            (state, Some(Failure::with_advice(f.kind, also, &f.advice)))
        }
    }
}
