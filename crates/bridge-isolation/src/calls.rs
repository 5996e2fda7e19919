//! The tool calls a run made, as the runners report them: what the audit compares with what
//! the task asked, and what names the files an agent wrote outside git.

/// One tool call, as printed by opencode once it completed or failed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCall {
    /// Tool name (`bash`, `write`, `read`, `task`, ...).
    pub tool: String,
    /// `completed` or `error` (opencode prints no other state).
    pub status: String,
    /// The title opencode gave the call (a command, a file path, ...).
    pub title: Option<String>,
    /// The error text for a failed call.
    pub error: Option<String>,
    /// Lines a file-writing call added and removed, read from its input (the runner's parser
    /// counts them); `None` where the input does not tell.
    pub added: Option<u64>,
    /// See `added`.
    pub removed: Option<u64>,
}

impl ToolCall {
    /// True when the call failed because a permission was rejected (auto-reject in `run`).
    pub fn permission_rejected(&self) -> bool {
        self.status == "error"
            && self
                .error
                .as_deref()
                .is_some_and(|e| e.contains("rejected permission"))
    }
}
