//! The `server` backend: an `opencode serve` HTTP API (v1 routes), optionally behind Basic auth.
//!
//! Routes used (observed on opencode 1.18.33, see `docs/API-NOTES.md`):
//! - `GET /experimental/session?limit=&cursor=&roots=&start=`: every session of every project,
//!   newest update first; the next page's cursor comes in the `X-Next-Cursor` header (absent on
//!   the last page);
//! - `GET /session/{id}`: one session;
//! - `GET /session/{id}/message?limit=&before=`: messages (`[{info, parts}]`, oldest first within
//!   a page); with `limit` the newest `limit` come first and `X-Next-Cursor` pages to older ones;
//! - `GET /session/status?directory=<dir>`: busy/retrying sessions of that directory's instance
//!   (idle ones are absent), asked once per distinct directory per call, and only for
//!   directories inside [`ServerSource::within`] when it is set: asked about a directory, a
//!   server creates an instance of it, which loads that directory's plugins and MCP servers
//!   (observed on 1.18.33); a session elsewhere is judged from its messages alone;
//! - `PATCH /session/{id}?directory=<dir>` with `{"title": …}`: rename.

use crate::decode::{decode_message, decode_part, model_of_json};
use crate::error::ClientError;
use crate::http::{HttpClient, encode_component, query};
use crate::model::{Message, Session, SessionFilter, SessionList, SessionTranscript};
use crate::remote::{self, Remote, keep_newest, session_record, str_of};
use crate::source::{ScanContext, SessionSource};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// Default number of sessions asked for per page of `/experimental/session`.
pub const SESSION_PAGE: usize = 100;
/// Default number of messages asked for per page of `/session/{id}/message`.
pub const MESSAGE_PAGE: usize = 200;

/// The `server` backend.
#[derive(Debug)]
pub struct ServerSource {
    http: HttpClient,
    /// `/session/status` answers of the current call, by directory.
    status_cache: Mutex<HashMap<String, HashSet<String>>>,
    /// Sessions and messages asked for per page.
    page_sizes: (usize, usize),
    /// Only directories inside this one are asked about (`?directory=`); `None`: any.
    within: Option<PathBuf>,
}

impl ServerSource {
    /// A backend reading the server behind `http`.
    pub fn new(http: HttpClient) -> ServerSource {
        ServerSource {
            http,
            status_cache: Mutex::new(HashMap::new()),
            page_sizes: (SESSION_PAGE, MESSAGE_PAGE),
            within: None,
        }
    }

    /// Asks the server about directories inside `root` only (canonical paths compared; a
    /// directory that cannot be resolved is not asked about); `None`: any.
    pub fn within(mut self, root: Option<&Path>) -> ServerSource {
        self.within = root.map(|r| r.canonicalize().unwrap_or_else(|_| r.to_path_buf()));
        self
    }

    /// Whether `directory` may be named to the server.
    fn may_ask(&self, directory: &str) -> bool {
        match &self.within {
            None => true,
            Some(root) => Path::new(directory)
                .canonicalize()
                .is_ok_and(|d| d.starts_with(root)),
        }
    }

    /// Asks for `sessions` sessions and `messages` messages per page (tests use small pages to
    /// exercise paging).
    pub fn with_page_sizes(mut self, sessions: usize, messages: usize) -> ServerSource {
        self.page_sizes = (sessions.max(1), messages.max(1));
        self
    }

    /// The HTTP client (its base URL names the server in messages).
    pub fn http(&self) -> &HttpClient {
        &self.http
    }

    fn busy_in(&self, directory: &str) -> Result<HashSet<String>, ClientError> {
        if let Some(hit) = self.cache().get(directory) {
            return Ok(hit.clone());
        }
        let path = format!(
            "/session/status{}",
            query(&[("directory", Some(directory.to_string()))])
        );
        let reply = self.http.get_json(&path)?;
        let map = reply
            .body
            .as_object()
            .ok_or_else(|| self.malformed("GET /session/status did not return an object"))?;
        let busy: HashSet<String> = map
            .iter()
            .filter(|(_, st)| {
                matches!(
                    st.get("type").and_then(Value::as_str),
                    Some("busy") | Some("retry")
                )
            })
            .map(|(id, _)| id.clone())
            .collect();
        self.cache().insert(directory.to_string(), busy.clone());
        Ok(busy)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<String>>> {
        self.status_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn malformed(&self, detail: &str) -> ClientError {
        ClientError::MalformedReply {
            url: self.http.base().to_string(),
            detail: detail.to_string(),
        }
    }

    fn message_page(
        &self,
        id: &str,
        limit: usize,
        before: Option<&str>,
    ) -> Result<(Vec<Message>, Option<String>), ClientError> {
        let path = format!(
            "/session/{}/message{}",
            encode_component(id),
            query(&[
                ("limit", Some(limit.to_string())),
                ("before", before.map(str::to_string)),
            ])
        );
        let reply = self.http.get_json(&path)?;
        let items = reply
            .body
            .as_array()
            .ok_or_else(|| self.malformed("GET /session/{id}/message did not return a list"))?;
        Ok((
            items.iter().map(message_from_v1).collect(),
            reply.next_cursor,
        ))
    }
}

impl Remote for ServerSource {
    fn backend(&self) -> &'static str {
        "server"
    }

    fn forget_busy(&self) {
        self.cache().clear();
    }

    fn fetch_session(&self, id: &str) -> Result<Session, ClientError> {
        check_id(id)?;
        let reply = self
            .http
            .get_json(&format!("/session/{}", encode_component(id)))?;
        session_from_v1(&reply.body)
            .ok_or_else(|| self.malformed("GET /session/{id} did not return a session"))
    }

    fn page(
        &self,
        cursor: Option<&str>,
        filter: &SessionFilter,
        ctx: &ScanContext,
    ) -> Result<(Vec<Session>, Option<String>), ClientError> {
        let roots =
            (filter.children == crate::model::Children::Exclude).then(|| "true".to_string());
        let start = filter.since_minutes.map(|m| {
            ctx.now_ms
                .saturating_sub((m as i64).saturating_mul(60_000))
                .to_string()
        });
        let path = format!(
            "/experimental/session{}",
            query(&[
                ("limit", Some(self.page_sizes.0.to_string())),
                ("cursor", cursor.map(str::to_string)),
                ("roots", roots),
                ("start", start),
            ])
        );
        let reply = self.http.get_json(&path)?;
        let items = reply
            .body
            .as_array()
            .ok_or_else(|| self.malformed("GET /experimental/session did not return a list"))?;
        let sessions = items.iter().filter_map(session_from_v1).collect();
        Ok((sessions, reply.next_cursor))
    }

    fn busy(&self, sessions: &[Session]) -> Result<HashSet<String>, ClientError> {
        let mut busy = HashSet::new();
        let dirs: HashSet<&str> = sessions.iter().map(|s| s.directory.as_str()).collect();
        for d in dirs.into_iter().filter(|d| self.may_ask(d)) {
            busy.extend(self.busy_in(d)?);
        }
        Ok(busy)
    }

    fn last_message(&self, session: &Session) -> Result<Option<Message>, ClientError> {
        let (mut page, _) = self.message_page(&session.id, 1, None)?;
        Ok(page.pop())
    }

    fn messages(
        &self,
        session: &Session,
        last: Option<usize>,
        deadline: Instant,
    ) -> Result<(Vec<Message>, usize), ClientError> {
        // Pages come newest first; each page is oldest first inside.
        let mut pages: Vec<Vec<Message>> = Vec::new();
        let mut total = 0usize;
        let mut before: Option<String> = None;
        loop {
            let (page, next) =
                self.message_page(&session.id, self.page_sizes.1, before.as_deref())?;
            total += page.len();
            pages.push(page);
            match next {
                Some(c) if Some(&c) != before.as_ref() && Instant::now() < deadline => {
                    before = Some(c)
                }
                _ => break,
            }
        }
        let mut all: Vec<Message> = pages.into_iter().rev().flatten().collect();
        keep_newest(&mut all, last);
        Ok((all, total))
    }
}

impl SessionSource for ServerSource {
    fn name(&self) -> &'static str {
        "server"
    }

    fn list(&self, filter: &SessionFilter, ctx: &ScanContext) -> Result<SessionList, ClientError> {
        remote::list(self, filter, ctx)
    }

    fn get(&self, id: &str, ctx: &ScanContext) -> Result<Session, ClientError> {
        remote::get(self, id, ctx)
    }

    fn transcript(
        &self,
        id: &str,
        last: Option<usize>,
        ctx: &ScanContext,
    ) -> Result<SessionTranscript, ClientError> {
        remote::transcript(self, id, last, ctx)
    }

    fn rename(&self, id: &str, title: &str, ctx: &ScanContext) -> Result<Session, ClientError> {
        let before = self.fetch_session(id)?;
        let path = format!(
            "/session/{}{}",
            encode_component(id),
            query(&[("directory", Some(before.directory.clone()))])
        );
        self.http.patch_json(&path, &json!({ "title": title }))?;
        self.get(id, ctx)
    }
}

/// Refuses ids that cannot be opencode session ids before they reach a URL.
pub(crate) fn check_id(id: &str) -> Result<(), ClientError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ClientError::InvalidArgument {
            field: "id",
            detail: format!("{id:?} is not an opencode session id (ses_…)"),
        })
    }
}

/// A v1 `Session` (or `GlobalSession`) JSON object → [`Session`], state not yet derived.
pub fn session_from_v1(v: &Value) -> Option<Session> {
    session_record(
        v,
        str_of(v, "directory").unwrap_or_default(),
        v.get("model").and_then(model_of_json),
    )
}

/// A v1 `{info, parts}` message → [`Message`], through the shared decoder.
pub fn message_from_v1(v: &Value) -> Message {
    let info = v.get("info").unwrap_or(&Value::Null);
    let parts = v
        .get("parts")
        .and_then(Value::as_array)
        .map(|ps| ps.iter().map(decode_part).collect())
        .unwrap_or_default();
    decode_message("", info, parts)
}
