//! Isolation and integrity of delegated runs: what keeps a run to its own tree, and what
//! checks afterwards that it did.
//!
//! - [`git`]: every git command the bridge runs, built so that nothing of a repository
//!   (fsmonitor, hooks, filter and diff drivers, pager) runs in the bridge.
//! - [`changes`]: the files an editing task changed, with a short diff stat.
//! - [`footprint`]: a bounded stat snapshot of a read-only run's tree, `.git/` and ignored
//!   paths included, compared after the run.
//! - [`protect`]: the protected paths of an editing run's project, recorded before the run and
//!   put back after it.
//! - [`audit`]: the post-run audit, the pure comparison of what a run's session used (agent,
//!   model, tool calls) and what changed in a read-only agent's tree with what the task asked;
//!   it answers with [`audit::Finding`]s the supervisor turns into the task's failure.
//! - [`worktree`]: `isolation: "worktree"`, an editing task in a detached git worktree of its
//!   own, its change applied to the caller's checkout (or discarded) when asked.
//! - [`ToolCall`]: a run's tool call, as the runners report it (the audit's and the changed
//!   files' input).
//!
//! Architecture invariant: this crate knows nothing of runners, tasks or the supervisor. It
//! takes plain inputs (paths, tool calls, what was asked) and returns plain verdicts; the
//! supervisor decides what they mean for a task. It depends only on `bridge-fence` (the
//! protected paths, the run's world) and `bridge-policy` (read-only permissions).

#![deny(unsafe_code)]

pub mod audit;
mod calls;
pub mod changes;
pub mod footprint;
pub mod git;
pub mod protect;
pub mod worktree;

pub use calls::ToolCall;
pub use changes::{ChangeSource, ChangedFiles, FileChange};
pub use worktree::Isolation;
