//! What one Claude Code session has not finished with: the tasks it delegated that still run,
//! and those that ended with a result it never read. Read by `opencode-bridge hook stop` (a
//! Claude Code Stop hook) straight from the registry's files: nothing is created, settled or
//! written, so a hook never races the bridges that own the tasks.

use std::path::Path;

use super::{Owner, Registry, judge};
use crate::task::TaskState;
use bridge_proc::ProcId;

/// A task of one client session that still needs its attention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsettled {
    pub id: u64,
    pub agent: String,
    pub title: String,
    /// The stored state; [`TaskState::Failed`] for a task whose bridge and run are both gone.
    pub state: TaskState,
    /// Still running (or about to be retried), not finished.
    pub running: bool,
}

/// The tasks delegated in Claude Code session `client_session` that run, or that finished
/// (not cancelled) without their result ever being read, oldest first. An absent or unreadable
/// registry has none.
pub fn unsettled(state_dir: &Path, client_session: &str) -> Vec<Unsettled> {
    let pid = std::process::id() as i32;
    let reg = Registry {
        dir: state_dir.to_path_buf(),
        me: ProcId::of(pid).unwrap_or(ProcId { pid, start_time: 0 }),
    };
    reg.ids()
        .into_iter()
        .filter_map(|id| reg.read_task(id))
        .filter(|t| t.client_session.as_deref() == Some(client_session))
        .filter_map(|t| {
            let (state, running) = match judge(&t) {
                Owner::Finished => (t.state(), false),
                Owner::Alive(_) | Owner::Orphan(_) | Owner::Resumable => (t.state(), true),
                Owner::Lost => (TaskState::Failed, false),
            };
            let pending = running || (state != TaskState::Cancelled && t.result_read_ms.is_none());
            pending.then_some(Unsettled {
                id: t.id,
                agent: t.agent,
                title: t.title,
                state,
                running,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::tests::task;
    use super::*;
    use crate::registry::now_ms;

    #[test]
    fn only_this_sessions_running_and_unread_tasks_are_unsettled() {
        let dir = tempfile::tempdir().unwrap();
        let reg = Registry::open(dir.path()).unwrap();
        let mine = |id, state, fin: Option<u64>, read: bool, who: &str| {
            let mut t = task(&reg, id, state, fin);
            t.client_session = Some(who.into());
            t.result_read_ms = read.then(now_ms);
            reg.write_task(&t);
        };
        mine(1, TaskState::Running, None, false, "A");
        mine(2, TaskState::Succeeded, Some(now_ms()), false, "A");
        mine(3, TaskState::Succeeded, Some(now_ms()), true, "A");
        mine(4, TaskState::Cancelled, Some(now_ms()), false, "A");
        mine(5, TaskState::Running, None, false, "B");
        // A task recorded without a client session belongs to none.
        reg.write_task(&task(&reg, 6, TaskState::Running, None));
        let got: Vec<(u64, bool)> = unsettled(dir.path(), "A")
            .iter()
            .map(|u| (u.id, u.running))
            .collect();
        assert_eq!(got, [(1, true), (2, false)]);
        assert!(unsettled(&dir.path().join("absent"), "A").is_empty());
        assert!(
            !dir.path().join("absent").exists(),
            "reading creates nothing"
        );
    }
}
