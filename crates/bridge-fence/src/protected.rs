//! Paths inside a writable project that run later, outside any fence: git's hooks and config,
//! the configuration Claude Code, opencode, editors and shells load from a project. An editing
//! run may write its project, but not these: what it planted there would run with the user's
//! full authority the next time they (or git, or their editor) open the project.
//!
//! The list follows the anchors: Codex keeps `.git` and its own `.codex` read-only inside
//! writable roots; Claude Code's sandbox denies writes to `.git/hooks`, `.git/config`,
//! `.gitmodules`, `.claude/settings*.json`, `.claude/commands`, `.claude/agents`, `.mcp.json`,
//! `.vscode`, `.idea` and shell rc files. We add what opencode and direnv load: opencode's
//! project configuration, plugins, tools and commands (`.opencode/`, `opencode.json[c]`) and
//! `.envrc`.
//!
//! This module only names the paths; the fence that keeps them read-only and the check after
//! a run that finds and restores what changed use [`PROTECTED`] and [`protected_in`].

use std::path::{Path, PathBuf};

/// Paths relative to a project's top (the directory holding `.git`, or the cwd), protected in
/// editing runs. A directory entry protects everything beneath it.
pub const PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".git/info",
    ".git/commondir",
    ".gitmodules",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/commands",
    ".claude/agents",
    ".claude/hooks",
    ".mcp.json",
    ".opencode",
    "opencode.json",
    "opencode.jsonc",
    ".envrc",
    ".vscode",
    ".idea",
    ".devcontainer",
];

/// The protected paths of the project whose top is `top`, as absolute paths (whether they
/// exist or not).
pub fn protected_in(top: &Path) -> Vec<PathBuf> {
    PROTECTED.iter().map(|p| top.join(p)).collect()
}

/// Whether `rel` (a path relative to a project's top) is a protected path or lies beneath one.
///
/// ```
/// use std::path::Path;
/// assert!(bridge_fence::protected::is_protected(Path::new(".git/hooks/pre-commit")));
/// assert!(bridge_fence::protected::is_protected(Path::new(".mcp.json")));
/// assert!(!bridge_fence::protected::is_protected(Path::new("src/.mcp.json.md")));
/// ```
pub fn is_protected(rel: &Path) -> bool {
    PROTECTED.iter().any(|p| rel.starts_with(p))
}
