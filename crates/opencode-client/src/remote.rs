//! What the two service backends (`server` and `api`) share: the listing loop, `get` and
//! `transcript` on top of the [`Remote`] primitives, and the decoding of a session record.
//!
//! A service hands out sessions page by page, newest first. For each session the loop applies
//! the cheap filters first (children, directory, title prefix, age), then asks the service for
//! the newest message to derive the state with [`crate::state::derive_state`], then the state
//! and agent filters, and last the text search, which may read every message of the session.
//! Paging stops when `limit` sessions matched, when the service has no more pages, when the
//! sessions get older than `since_minutes`, or at the scan deadline (the answer then says
//! PARTIAL and how far it got).

use crate::decode::decode_tokens;
use crate::error::ClientError;
use crate::filter::{
    contains_ignore_case, matches_session, since_ms, title_matches_search, validate,
};
use crate::model::{
    Message, Part, Role, Session, SessionFilter, SessionList, SessionState, SessionTranscript,
};
use crate::source::ScanContext;
use crate::state::derive_state;
use serde_json::Value;
use std::collections::HashSet;
use std::time::Instant;

/// What a service backend must be able to do for the shared listing loop.
pub(crate) trait Remote {
    /// `server` or `api`.
    fn backend(&self) -> &'static str;
    /// Drops the busy answers remembered during the previous call (each call asks afresh).
    fn forget_busy(&self);
    /// One session by id, with the state not yet derived.
    fn fetch_session(&self, id: &str) -> Result<Session, ClientError>;
    /// One page of sessions, newest first, with the state not yet derived (the loop sets it),
    /// and the cursor of the next page.
    fn page(
        &self,
        cursor: Option<&str>,
        filter: &SessionFilter,
        ctx: &ScanContext,
    ) -> Result<(Vec<Session>, Option<String>), ClientError>;
    /// Ids of the given sessions that the service reports busy (running or retrying).
    fn busy(&self, sessions: &[Session]) -> Result<HashSet<String>, ClientError>;
    /// The newest message of a session (with parts), if any.
    fn last_message(&self, session: &Session) -> Result<Option<Message>, ClientError>;
    /// Messages of a session, oldest first: all of them, or the newest `last`; and the total
    /// number of messages the session has. Paging stops at `deadline`.
    fn messages(
        &self,
        session: &Session,
        last: Option<usize>,
        deadline: Instant,
    ) -> Result<(Vec<Message>, usize), ClientError>;
}

/// `SessionSource::list` of a service backend: fresh busy answers, then the listing loop.
pub(crate) fn list(
    remote: &dyn Remote,
    filter: &SessionFilter,
    ctx: &ScanContext,
) -> Result<SessionList, ClientError> {
    remote.forget_busy();
    scan(remote, filter, ctx)
}

/// `SessionSource::get` of a service backend: the session with its state derived.
pub(crate) fn get(
    remote: &dyn Remote,
    id: &str,
    ctx: &ScanContext,
) -> Result<Session, ClientError> {
    remote.forget_busy();
    let mut session = remote.fetch_session(id)?;
    let busy = remote.busy(std::slice::from_ref(&session))?;
    let last = remote.last_message(&session)?;
    apply_last_message(&mut session, last.as_ref(), &busy, ctx);
    Ok(session)
}

/// `SessionSource::transcript` of a service backend.
pub(crate) fn transcript(
    remote: &dyn Remote,
    id: &str,
    last: Option<usize>,
    ctx: &ScanContext,
) -> Result<SessionTranscript, ClientError> {
    let session = get(remote, id, ctx)?;
    let (messages, total_messages) = remote.messages(&session, last, ctx.deadline)?;
    Ok(SessionTranscript {
        session,
        messages,
        total_messages,
    })
}

/// Keeps only the newest `last` of `all` (oldest first), or all of them without `last`.
pub(crate) fn keep_newest(all: &mut Vec<Message>, last: Option<usize>) {
    if let Some(n) = last
        && all.len() > n
    {
        all.drain(..all.len() - n);
    }
}

/// A service's session record (v1 `Session`/`GlobalSession` or v2 `SessionV2Info`, which
/// differ only in where the directory and the model are) → [`Session`], state not yet derived.
/// `None` without a string `id`.
pub(crate) fn session_record(
    v: &Value,
    directory: String,
    model: Option<String>,
) -> Option<Session> {
    let id = v.get("id")?.as_str()?.to_string();
    let time = v.get("time");
    let int = |k: &str| {
        time.and_then(|t| t.get(k))
            .and_then(Value::as_f64)
            .map(|f| f as i64)
    };
    let created_ms = int("created").unwrap_or(0);
    Some(Session {
        id,
        title: str_of(v, "title").unwrap_or_default(),
        directory,
        project_id: str_of(v, "projectID").unwrap_or_default(),
        parent_id: str_of(v, "parentID"),
        agent: str_of(v, "agent"),
        model,
        tokens: v.get("tokens").map(decode_tokens).unwrap_or_default(),
        cost: v.get("cost").and_then(Value::as_f64).unwrap_or(0.0),
        created_ms,
        updated_ms: int("updated").unwrap_or(created_ms),
        state: SessionState::Running,
        error: None,
        version: str_of(v, "version"),
    })
}

/// The string at `key`, if present and not empty.
pub(crate) fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Derives the state of `session` from its newest message (see [`crate::state`]).
fn apply_last_message(
    session: &mut Session,
    last: Option<&Message>,
    busy: &HashSet<String>,
    ctx: &ScanContext,
) {
    let last_is_user = matches!(last, Some(m) if m.role == Role::User);
    let last_assistant = last.filter(|m| m.role == Role::Assistant);
    let mut activity = session.updated_ms;
    if let Some(m) = last {
        activity = activity.max(m.created_ms).max(m.completed_ms.unwrap_or(0));
        for p in &m.parts {
            if let Part::Text {
                time_ms: Some(t), ..
            }
            | Part::Tool {
                time_ms: Some(t), ..
            } = p
            {
                activity = activity.max(*t);
            }
        }
    }
    let merged;
    let ctx = if busy.contains(&session.id) && !ctx.liveness.busy.contains(&session.id) {
        let mut c = ctx.clone();
        c.liveness.busy.insert(session.id.clone());
        merged = c;
        &merged
    } else {
        ctx
    };
    let (state, error) = derive_state(last_assistant, last_is_user, activity, &session.id, ctx);
    session.state = state;
    session.error = error;
    if let Some(m) = last_assistant {
        if session.agent.is_none() {
            session.agent = m.agent.clone();
        }
        if session.model.is_none() {
            session.model = m.model.clone();
        }
    }
}

/// The listing loop; see the module docs.
fn scan(
    remote: &dyn Remote,
    filter: &SessionFilter,
    ctx: &ScanContext,
) -> Result<SessionList, ClientError> {
    validate(filter)?;
    let limit = if filter.limit == 0 {
        usize::MAX
    } else {
        filter.limit
    };
    let since = since_ms(filter, ctx.now_ms);
    // The filters a session record alone can answer (state and agent need its messages).
    let cheap = SessionFilter {
        state: None,
        agent: None,
        ..filter.clone()
    };
    let mut out = Vec::new();
    let mut scanned = 0usize;
    let mut pages = 0usize;
    let mut cursor: Option<String> = None;
    let mut partial = None;
    let mut seen = HashSet::new();
    'pages: loop {
        if Instant::now() >= ctx.deadline {
            partial = Some(deadline_note(scanned, pages, out.len()));
            break;
        }
        let (page, next) = remote.page(cursor.as_deref(), filter, ctx)?;
        pages += 1;
        if page.is_empty() {
            break;
        }
        let mut too_old = false;
        let mut candidates = Vec::new();
        for s in page {
            if !seen.insert(s.id.clone()) {
                continue;
            }
            if let Some(since) = since
                && s.updated_ms < since
            {
                too_old = true;
                continue;
            }
            scanned += 1;
            if matches_session(&s, &cheap, ctx.now_ms) {
                candidates.push(s);
            }
        }
        let busy = if candidates.is_empty() {
            HashSet::new()
        } else {
            remote.busy(&candidates)?
        };
        for mut s in candidates {
            if Instant::now() >= ctx.deadline {
                partial = Some(deadline_note(scanned, pages, out.len()));
                break 'pages;
            }
            let last = remote.last_message(&s)?;
            apply_last_message(&mut s, last.as_ref(), &busy, ctx);
            if !matches_session(&s, filter, ctx.now_ms) {
                continue;
            }
            if let Some(q) = filter.search.as_deref()
                && !title_matches_search(&s.title, filter)
            {
                let (messages, _) = remote.messages(&s, None, ctx.deadline)?;
                if !messages.iter().any(|m| message_contains(m, q)) {
                    continue;
                }
            }
            out.push(s);
            if out.len() >= limit {
                break 'pages;
            }
        }
        match next {
            Some(c) if !too_old && Some(&c) != cursor.as_ref() => cursor = Some(c),
            _ => break,
        }
    }
    out.sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then(b.id.cmp(&a.id)));
    Ok(SessionList {
        sessions: out,
        scanned,
        partial,
        backend: remote.backend(),
    })
}

fn deadline_note(scanned: usize, pages: usize, matched: usize) -> String {
    format!(
        "scan deadline reached after {scanned} session(s) on {pages} page(s) ({matched} matched so far); narrow the filters or raise OPENCODE_BRIDGE_SCAN_DEADLINE_MS"
    )
}

fn message_contains(m: &Message, needle: &str) -> bool {
    m.parts.iter().any(|p| match p {
        Part::Text { text, .. } => contains_ignore_case(text, needle),
        _ => false,
    })
}
