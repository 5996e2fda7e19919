//! The one interface every backend implements.

use crate::error::ClientError;
use crate::model::{Session, SessionFilter, SessionList, SessionTranscript};
use std::collections::HashSet;
use std::time::Instant;

/// What is known about liveness from outside the store, used to tell a killed run (no outcome,
/// process gone) from a running one (no outcome, process alive). See `docs/API-NOTES.md`.
#[derive(Debug, Clone, Default)]
pub struct Liveness {
    /// Sessions a service reports busy/retrying, or that a live opencode process is working on.
    pub busy: HashSet<String>,
    /// Sessions whose process is known to be gone (a task of ours that ended, for example).
    pub gone: HashSet<String>,
}

/// Limits and outside knowledge for one call.
#[derive(Debug, Clone)]
pub struct ScanContext {
    /// Stop scanning at this instant and answer PARTIAL.
    pub deadline: Instant,
    /// "Now" in epoch ms, injectable so tests are stable.
    pub now_ms: i64,
    pub liveness: Liveness,
}

/// One backend: the SQLite store, `opencode serve`, or the v2 service API.
pub trait SessionSource: Send + Sync {
    /// `store`, `server` or `api`.
    fn name(&self) -> &'static str;
    /// Sessions matching the filter, newest first, at most `filter.limit`.
    fn list(&self, filter: &SessionFilter, ctx: &ScanContext) -> Result<SessionList, ClientError>;
    /// One session by id.
    fn get(&self, id: &str, ctx: &ScanContext) -> Result<Session, ClientError>;
    /// A session with its messages; `last` = only the newest N messages (all when `None`).
    fn transcript(
        &self,
        id: &str,
        last: Option<usize>,
        ctx: &ScanContext,
    ) -> Result<SessionTranscript, ClientError>;
    /// Sets the title (the only write the bridge ever does to a session).
    fn rename(&self, id: &str, title: &str, ctx: &ScanContext) -> Result<Session, ClientError>;
}
