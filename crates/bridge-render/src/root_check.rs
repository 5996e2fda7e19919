//! What the tools say when a directory lies outside the delegation root (nothing in it is read or
//! run: no opencode, no marker files, no agent files), and when a caller string that would reach
//! a session title carried a secret.
//!
//! `opencode_start` refuses an outside cwd with the supervisor's own wording
//! (`run_supervisor::StartError::CwdOutsideRoot`); these are the other answers.

use std::path::Path;

/// The longest path a directory can have (Linux `PATH_MAX`, in bytes).
pub const PATH_MAX: usize = 4096;

/// `opencode_policy` for a directory outside the root.
pub fn policy_outside_root(dir: &Path, root: &Path) -> String {
    format!(
        "cwd {} is outside OPENCODE_BRIDGE_ROOT ({}): opencode_start refuses every task there, so no policy applies to it, and the bridge read and ran nothing in it; call opencode_policy without cwd for the root's policy, use a directory inside the root, or start the bridge with a wider OPENCODE_BRIDGE_ROOT",
        dir.display(),
        root.display()
    )
}

/// A directory argument longer than any path.
pub fn path_too_long(field: &str, bytes: usize) -> String {
    format!(
        "bad argument `{field}`: it is {bytes} bytes long, longer than any path ({PATH_MAX}); pass an existing directory inside OPENCODE_BRIDGE_ROOT"
    )
}

/// `opencode_session_rename` of a session whose directory lies outside the root: renaming it
/// needs an opencode instance of that directory, which would load its plugins and MCP servers.
pub fn rename_outside_root(id: &str, dir: &str, root: &Path) -> String {
    let whose = if dir.is_empty() {
        "has no directory recorded, so it is not known to lie inside".to_owned()
    } else {
        format!("belongs to {dir}, outside")
    };
    format!(
        "refused: session {id} {whose} OPENCODE_BRIDGE_ROOT ({}); renaming it needs an opencode instance of its directory, which would load that directory's plugins and MCP servers. Rename it from opencode there, or start the bridge with a wider OPENCODE_BRIDGE_ROOT",
        root.display()
    )
}

/// The note added when a caller string on its way to a session title (or a task label) held a
/// secret: `field` names the argument.
pub fn secret_replaced(field: &str) -> String {
    format!(
        "a secret in `{field}` was replaced by [secret]: session titles and task labels never carry one"
    )
}

/// `opencode_session_rename` with a title that is nothing but control characters and blanks.
pub fn title_empty() -> String {
    "bad argument `title`: nothing is left once control characters are removed; give the new title, e.g. `DOCS/librarian: collect API notes`".to_owned()
}
