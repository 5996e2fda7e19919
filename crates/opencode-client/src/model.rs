//! The values every backend produces. Times are epoch milliseconds, as opencode stores them.

use serde::Serialize;
use std::time::Duration;

/// A session is `stale?` when it has no outcome and nothing happened in it for this long.
pub const STALE_AFTER: Duration = Duration::from_secs(45 * 60);

/// What a session is doing or how it ended, derived from its last assistant message (see
/// `docs/API-NOTES.md` for the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// No outcome yet, and recent (or reported busy by a service, or its process is alive).
    Running,
    /// The last assistant message completed without an error.
    Succeeded,
    /// The last assistant message carries an error other than an abort.
    Failed,
    /// Aborted by a user, or killed: no outcome and its process is known to be gone.
    Interrupted,
    /// No outcome, and quiet for [`STALE_AFTER`]: crashed, killed, or a very long silent tool call.
    Stale,
}

impl SessionState {
    /// The word shown to people and accepted by the `state` filter.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::Running => "running",
            SessionState::Succeeded => "succeeded",
            SessionState::Failed => "failed",
            SessionState::Interrupted => "interrupted",
            SessionState::Stale => "stale?",
        }
    }

    /// Parses a filter value; `stale` and `stale?` are both accepted.
    pub fn parse(s: &str) -> Option<SessionState> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "running" => SessionState::Running,
            "succeeded" => SessionState::Succeeded,
            "failed" => SessionState::Failed,
            "interrupted" => SessionState::Interrupted,
            "stale" | "stale?" => SessionState::Stale,
            _ => return None,
        })
    }

    /// Every state, in the order they are documented.
    pub const ALL: [SessionState; 5] = [
        SessionState::Running,
        SessionState::Succeeded,
        SessionState::Failed,
        SessionState::Interrupted,
        SessionState::Stale,
    ];
}

/// Token counts as opencode reports them (`input` excludes cache reads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// One opencode session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Session {
    pub id: String,
    pub title: String,
    pub directory: String,
    pub project_id: String,
    pub parent_id: Option<String>,
    /// Agent of the session (or of its last assistant message when the session row has none).
    pub agent: Option<String>,
    /// `provider/model`, when known.
    pub model: Option<String>,
    pub tokens: Tokens,
    pub cost: f64,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub state: SessionState,
    /// The error of the last assistant message, when the session failed: `Name: message`.
    pub error: Option<String>,
    /// opencode version that wrote the session.
    pub version: Option<String>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One message with its parts, oldest part first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: String,
    pub role: Role,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub created_ms: i64,
    pub completed_ms: Option<i64>,
    /// AI-SDK finish reason of an assistant message (`stop`, `tool-calls`, `length`, ...).
    pub finish: Option<String>,
    /// `Name: message` of an assistant message error.
    pub error: Option<MessageError>,
    pub tokens: Tokens,
    pub cost: f64,
    pub parts: Vec<Part>,
}

/// The error an assistant message ended with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageError {
    /// opencode's error name: `APIError`, `ProviderAuthError`, `MessageAbortedError`, ...
    pub name: String,
    pub message: String,
    pub status_code: Option<u16>,
}

/// Status of a tool call part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Pending,
    Running,
    Completed,
    Error,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Pending => "pending",
            ToolStatus::Running => "running",
            ToolStatus::Completed => "completed",
            ToolStatus::Error => "error",
        }
    }
}

/// One part of a message, reduced to what the tools show. Reasoning is kept as a kind so that
/// callers can count it, but its text is never carried.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
        synthetic: bool,
        time_ms: Option<i64>,
    },
    Reasoning,
    Tool {
        tool: String,
        status: ToolStatus,
        /// The tool input as compact JSON.
        input: String,
        /// Output on success, error text on failure.
        output: Option<String>,
        time_ms: Option<i64>,
    },
    StepStart,
    StepFinish {
        reason: Option<String>,
    },
    /// Files changed by a step (`patch` parts).
    Patch {
        files: Vec<String>,
    },
    /// Agent switch / subtask / file / compaction and any part type this crate does not know.
    Other {
        part_type: String,
        summary: String,
    },
}

/// Which sessions to list. Empty filter = everything, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionFilter {
    pub state: Option<SessionState>,
    pub agent: Option<String>,
    /// Substring of the session directory (case-sensitive path match).
    pub directory: Option<String>,
    /// Case-insensitive substring of the title or of any message text.
    pub search: Option<String>,
    pub title_prefix: Option<String>,
    pub since_minutes: Option<u64>,
    /// How many sessions to return at most (default applied by the caller).
    pub limit: usize,
    pub children: Children,
}

/// Whether child (subagent) sessions are listed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Children {
    /// Roots and children.
    #[default]
    Include,
    /// Roots only.
    Exclude,
    /// Children only.
    Only,
}

/// The answer to a listing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionList {
    pub sessions: Vec<Session>,
    /// How many sessions were looked at.
    pub scanned: usize,
    /// Set when the scan deadline hit: says how far it got.
    pub partial: Option<String>,
    /// Which backend answered (`store`, `server`, `api`).
    pub backend: &'static str,
}

/// One session with its messages, for `opencode_session_output`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionTranscript {
    pub session: Session,
    /// Oldest first. May be only the newest N when the caller asked for a tail.
    pub messages: Vec<Message>,
    /// Total number of messages in the session.
    pub total_messages: usize,
}
