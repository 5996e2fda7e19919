//! An isolated task's worktree, as the supervisor drives it: one check at start, one call
//! before the first attempt, one when the run ended. The worktree itself (plan, create, collect,
//! apply, discard) is `bridge_isolation::worktree`.

use std::path::Path;

use crate::error::StartError;
use crate::spec::TaskSpec;
use bridge_isolation::worktree::{
    Checked, Isolation, WorktreeInfo, check, collect, create, load, plan,
};

/// At `start`: refuses isolation that cannot work (a read-only agent, no git, no commit, no
/// state directory), before the task gets an id.
pub(crate) fn start_check(
    spec: &TaskSpec,
    cwd: &Path,
    state_dir: Option<&Path>,
) -> Result<Option<Checked>, StartError> {
    if spec.isolation != Isolation::Worktree {
        return Ok(None);
    }
    if spec.read_only {
        return Err(StartError::InvalidSpec(format!(
            "isolation \"worktree\" is for editing agents, and {} is read-only: drop isolation",
            spec.agent
        )));
    }
    check(cwd, state_dir)
        .map(Some)
        .map_err(StartError::InvalidSpec)
}

/// Before the first attempt: makes the worktree the task's cwd points into.
pub(crate) fn before_run(
    spec: &TaskSpec,
    state_dir: Option<&Path>,
    id: u64,
) -> Result<Option<WorktreeInfo>, String> {
    if spec.isolation != Isolation::Worktree {
        return Ok(None);
    }
    let cwd = spec
        .cwd
        .canonicalize()
        .map_err(|e| format!("cwd {} cannot be used ({e})", spec.cwd.display()))?;
    let state_dir = state_dir.ok_or("isolation \"worktree\" needs the state directory")?;
    let plan = plan(&cwd, Some(state_dir), id)?;
    create(&plan, state_dir).map(Some)
}

/// When the run ended: collects the change (the patch `opencode_result` shows).
pub(crate) fn after_run(state_dir: Option<&Path>, id: u64) {
    let Some(state_dir) = state_dir else { return };
    if load(state_dir, id).is_some()
        && let Err(e) = collect(state_dir, id)
    {
        tracing::warn!(task = id, "cannot collect the worktree's change: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("repo");
        std::fs::create_dir(&r).unwrap();
        bridge_testkit::git_repo(&r, &[("a.txt", "a\n")]);
        (d, r)
    }

    #[test]
    fn start_check_refuses_read_only_agents_and_ignores_tasks_without_isolation() {
        let (d, r) = repo();
        let state = d.path().join("state");
        let mut spec = TaskSpec::new("p", &r, "explorer", "T/explorer: p");
        assert_eq!(start_check(&spec, &r, Some(&state)).unwrap(), None);
        spec.isolation = Isolation::Worktree;
        let c = start_check(&spec, &r, Some(&state)).unwrap().unwrap();
        assert_eq!(c.for_task(9).run_cwd(), c.root.join("9"));
        spec.read_only = true;
        let e = start_check(&spec, &r, Some(&state))
            .unwrap_err()
            .to_string();
        assert!(e.contains("explorer is read-only: drop isolation"), "{e}");
    }
}
