//! The `api` backend: the opencode v2 service through its own CLI, `opencode api <METHOD> <path>`.
//!
//! The v2 CLI finds the per-user service and carries its credentials, so the bridge never sees
//! a password. Each call is one short-lived child process: stdout is the reply body, a non-2xx
//! reply makes the CLI print `HTTP <status> <reason>` on stderr and exit 1. The child is bounded
//! by the service-call timeout (then killed, with its process group, and reaped) and its stdout
//! by the reply-size cap.
//!
//! Routes used (see `docs/API-NOTES.md`):
//! - `GET /api/session?limit=&cursor=` → `{data:[…], cursor:{next}}`, newest first;
//! - `GET /api/session/{id}` → `{data:{…}}`;
//! - `GET /api/session/{id}/message?limit=&cursor=` → `{data:[…], cursor:{next}}`, newest
//!   first; when it is empty (opencode 1.18 does not project sessions written by its v1 loop
//!   into the v2 message table) the v1 route `GET /session/{id}/message` is asked instead;
//! - `GET /api/session/active` → `{data:{"ses_…":{type}}}` for liveness;
//! - rename: `PATCH /api/session/{id}` `{title}`; where the service has no such route (1.18.33
//!   answers it with its web page), `PATCH /session/{id}` `{title}`.

use crate::decode::{decode_part, decode_tokens, model_of_json};
use crate::error::ClientError;
use crate::http::{
    encode_component, error_detail, one_line, parse_json, query, session_id_in_path,
};
use crate::model::{
    Message, MessageError, Part, Role, Session, SessionFilter, SessionList, SessionTranscript,
    ToolStatus,
};
use crate::remote::{self, Remote, keep_newest, session_record, str_of};
use crate::server::{check_id, message_from_v1};
use crate::source::{ScanContext, SessionSource};
use bridge_proc::{CaptureError, CaptureLimits};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Default number of sessions asked for per page of `/api/session`.
pub const SESSION_PAGE: usize = 100;
/// Default number of messages asked for per page of `/api/session/{id}/message`.
pub const MESSAGE_PAGE: usize = 200;
/// How the service is named in error messages.
const SERVICE_LABEL: &str = "the opencode v2 service (via `opencode api`)";

/// Runs `<program> api <METHOD> <path> [-d <json>]` with a timeout and a reply-size cap.
#[derive(Debug, Clone)]
pub struct ApiCommand {
    program: PathBuf,
    timeout: Duration,
    max_reply_bytes: u64,
    /// The background servers our calls started (see [`ApiCommand::stop_started`]).
    started: std::sync::Arc<Mutex<Vec<bridge_proc::ProcId>>>,
}

/// The background server `opencode api` registers (`$XDG_STATE_HOME/opencode/server.json`,
/// `{id, version, url, pid}`: no password), when its process is alive.
fn registered_server() -> Option<bridge_proc::ProcId> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".local/state"))
        })?;
    let text = std::fs::read_to_string(state.join("opencode/server.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    let pid = i32::try_from(v.get("pid")?.as_u64()?).ok()?;
    bridge_proc::ProcId::of(pid)
}

impl ApiCommand {
    /// `program` is the v2 `opencode` binary (`OPENCODE_BIN`, else `opencode` on `PATH`).
    pub fn new(program: impl Into<PathBuf>, timeout: Duration, max_reply_bytes: u64) -> ApiCommand {
        ApiCommand {
            program: program.into(),
            timeout,
            max_reply_bytes,
            started: std::sync::Arc::default(),
        }
    }

    /// Stops the background servers this command's calls started (opencode 2's `api` starts
    /// a detached `serve --register` when none runs, and it outlives the call): each only while
    /// it is still that process and leads its group (`bridge_proc::tree::stop_left_group`).
    /// A server that ran before a call is never touched.
    pub fn stop_started(&self) {
        let started = std::mem::take(&mut *self.started.lock().unwrap_or_else(|e| e.into_inner()));
        for p in started {
            bridge_proc::tree::stop_left_group(p, Duration::from_secs(3));
        }
    }

    /// The binary this runs.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Runs one call and returns stdout. A non-zero exit becomes a typed error.
    pub fn call_raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Vec<u8>, ClientError> {
        let mut cmd = Command::new(&self.program);
        cmd.arg("api").arg(method).arg(path);
        if let Some(b) = body {
            cmd.arg("-d").arg(b.to_string());
        }
        let limits = CaptureLimits {
            stdout_bytes: self.max_reply_bytes,
            stderr_bytes: 64 * 1024,
        };
        // A server registered before the call is the user's; one registered during it, whose
        // process started since, was started by this call.
        let before = registered_server();
        let began = Instant::now();
        let ran = bridge_proc::run_capture(&mut cmd, self.timeout, limits);
        if before.is_none()
            && let Some(p) = registered_server()
            && bridge_proc::BootClock::now()
                .is_some_and(|c| c.age(p.start_time) <= began.elapsed() + Duration::from_secs(1))
        {
            let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
            if !started.contains(&p) {
                started.push(p);
            }
        }
        let c = ran.map_err(|e| match e {
            CaptureError::Spawn(e) => ClientError::ApiCommand {
                detail: format!("cannot start {}: {e}", self.program.display()),
            },
            CaptureError::TimedOut => ClientError::ServiceTimeout {
                url: SERVICE_LABEL.into(),
                timeout_ms: self.timeout.as_millis() as u64,
            },
        })?;
        if c.stdout_over {
            return Err(ClientError::ReplyTooLarge {
                url: SERVICE_LABEL.into(),
                limit_bytes: self.max_reply_bytes,
            });
        }
        let (status, out, err) = (c.status, c.stdout, c.stderr);
        match status {
            Some(st) if st.success() => Ok(out),
            other => Err(command_error(
                path,
                &out,
                &err,
                other.and_then(|s| s.code()),
            )),
        }
    }

    /// Runs one call and parses stdout as JSON.
    pub fn call_json(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let out = self.call_raw(method, path, body)?;
        parse_json(&out).map_err(|detail| ClientError::MalformedReply {
            url: SERVICE_LABEL.into(),
            detail,
        })
    }
}

/// Maps a failed `opencode api` run to an error: `HTTP <status>` on stderr is a service answer,
/// anything else a failure of the command itself.
fn command_error(path: &str, stdout: &[u8], stderr: &[u8], code: Option<i32>) -> ClientError {
    let err_text = String::from_utf8_lossy(stderr);
    let status = err_text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("HTTP ")?;
        rest.split_whitespace().next()?.parse::<u16>().ok()
    });
    match status {
        Some(401) => ClientError::Unauthorized {
            url: SERVICE_LABEL.into(),
        },
        Some(404) if session_id_in_path(path).is_some() => ClientError::NotFound {
            id: session_id_in_path(path).unwrap_or_default(),
        },
        Some(st) => ClientError::ServiceError {
            url: SERVICE_LABEL.into(),
            status: st,
            detail: error_detail(stdout),
        },
        None => {
            let mut detail = one_line(err_text.trim());
            if detail.is_empty() {
                detail = one_line(String::from_utf8_lossy(stdout).trim());
            }
            if detail.chars().count() > 300 {
                detail = detail.chars().take(300).collect::<String>() + "…";
            }
            let code = code.map_or("a signal".to_string(), |c| format!("code {c}"));
            ClientError::ApiCommand {
                detail: if detail.is_empty() {
                    format!("exited with {code}")
                } else {
                    format!("exited with {code}: {detail}")
                },
            }
        }
    }
}

/// How the `api` backend reaches the v2 service: through `opencode api` (the per-user service),
/// or straight over HTTP (a server of the config file that speaks opencode 2).
#[derive(Debug)]
enum Caller {
    Command(ApiCommand),
    Http(crate::http::HttpClient),
}

impl Caller {
    fn call_json(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        match self {
            Caller::Command(c) => c.call_json(method, path, body),
            Caller::Http(h) => {
                let empty = json!({});
                let reply = match method {
                    "GET" => h.get_json(path),
                    "PATCH" => h.patch_json(path, body.unwrap_or(&empty)),
                    _ => h.post_json(path, body.unwrap_or(&empty)),
                }?;
                Ok(reply.body)
            }
        }
    }

    /// Who answers, for errors.
    fn label(&self) -> String {
        match self {
            Caller::Command(_) => SERVICE_LABEL.into(),
            Caller::Http(h) => h.base().to_owned(),
        }
    }
}

/// The `api` backend.
#[derive(Debug)]
pub struct ApiSource {
    cmd: Caller,
    active: Mutex<Option<HashSet<String>>>,
    /// Sessions and messages asked for per page.
    page_sizes: (usize, usize),
}

impl ApiSource {
    /// A backend running `cmd` for every call.
    pub fn new(cmd: ApiCommand) -> ApiSource {
        ApiSource {
            cmd: Caller::Command(cmd),
            active: Mutex::new(None),
            page_sizes: (SESSION_PAGE, MESSAGE_PAGE),
        }
    }

    /// A backend asking the opencode 2 server behind `http` straight (its `/api` routes).
    pub fn over_http(http: crate::http::HttpClient) -> ApiSource {
        ApiSource {
            cmd: Caller::Http(http),
            active: Mutex::new(None),
            page_sizes: (SESSION_PAGE, MESSAGE_PAGE),
        }
    }

    /// Asks for `sessions` sessions and `messages` messages per page (tests use small pages to
    /// exercise paging).
    pub fn with_page_sizes(mut self, sessions: usize, messages: usize) -> ApiSource {
        self.page_sizes = (sessions.max(1), messages.max(1));
        self
    }

    fn malformed(&self, detail: &str) -> ClientError {
        ClientError::MalformedReply {
            url: self.cmd.label(),
            detail: detail.to_string(),
        }
    }

    fn active_cache(&self) -> std::sync::MutexGuard<'_, Option<HashSet<String>>> {
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One page of v2 messages, newest first, and the next cursor.
    fn v2_message_page(
        &self,
        id: &str,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<Message>, Option<String>), ClientError> {
        let path = format!(
            "/api/session/{}/message{}",
            encode_component(id),
            query(&[
                ("limit", Some(limit.to_string())),
                ("cursor", cursor.map(str::to_string)),
            ])
        );
        let v = self.cmd.call_json("GET", &path, None)?;
        let items = v.get("data").and_then(Value::as_array).ok_or_else(|| {
            self.malformed("GET /api/session/{id}/message did not return {data: [...]}")
        })?;
        let next = v
            .pointer("/cursor/next")
            .and_then(Value::as_str)
            .map(str::to_string);
        let messages = items
            .iter()
            .filter(|m| is_conversation_message(m))
            .map(message_from_v2)
            .collect();
        Ok((messages, next))
    }

    /// v1 messages (the fallback for sessions the v2 route shows empty), oldest first: all of
    /// them, or the newest `limit`. `None` when the service does not serve the v1 route.
    fn v1_messages(&self, id: &str, limit: Option<usize>) -> Option<Vec<Message>> {
        let path = format!(
            "/session/{}/message{}",
            encode_component(id),
            query(&[("limit", limit.map(|l| l.to_string()))])
        );
        let v = self.cmd.call_json("GET", &path, None).ok()?;
        Some(v.as_array()?.iter().map(message_from_v1).collect())
    }
}

impl Drop for ApiSource {
    /// Nothing `opencode api` started outlives the backend that called it.
    fn drop(&mut self) {
        if let Caller::Command(c) = &self.cmd {
            c.stop_started();
        }
    }
}

impl Remote for ApiSource {
    fn backend(&self) -> &'static str {
        "api"
    }

    fn forget_busy(&self) {
        *self.active_cache() = None;
    }

    fn fetch_session(&self, id: &str) -> Result<Session, ClientError> {
        check_id(id)?;
        let v = self.cmd.call_json(
            "GET",
            &format!("/api/session/{}", encode_component(id)),
            None,
        )?;
        v.get("data")
            .and_then(session_from_v2)
            .ok_or_else(|| self.malformed("GET /api/session/{id} did not return {data: session}"))
    }

    fn page(
        &self,
        cursor: Option<&str>,
        _filter: &SessionFilter,
        _ctx: &ScanContext,
    ) -> Result<(Vec<Session>, Option<String>), ClientError> {
        let path = format!(
            "/api/session{}",
            query(&[
                ("limit", Some(self.page_sizes.0.to_string())),
                ("cursor", cursor.map(str::to_string)),
            ])
        );
        let v = self.cmd.call_json("GET", &path, None)?;
        let items = v
            .get("data")
            .and_then(Value::as_array)
            .ok_or_else(|| self.malformed("GET /api/session did not return {data: [...]}"))?;
        let next = v
            .pointer("/cursor/next")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok((items.iter().filter_map(session_from_v2).collect(), next))
    }

    fn busy(&self, _sessions: &[Session]) -> Result<HashSet<String>, ClientError> {
        if let Some(hit) = self.active_cache().as_ref() {
            return Ok(hit.clone());
        }
        let v = self.cmd.call_json("GET", "/api/session/active", None)?;
        let map = v.get("data").and_then(Value::as_object).ok_or_else(|| {
            self.malformed("GET /api/session/active did not return {data: {...}}")
        })?;
        let busy: HashSet<String> = map
            .iter()
            .filter(|(_, st)| st.get("type").and_then(Value::as_str) != Some("idle"))
            .map(|(id, _)| id.clone())
            .collect();
        *self.active_cache() = Some(busy.clone());
        Ok(busy)
    }

    fn last_message(&self, session: &Session) -> Result<Option<Message>, ClientError> {
        // A few, because v2 also lists `system` messages (skipped), which can be the newest.
        let (page, _) = self.v2_message_page(&session.id, 5, None)?;
        if let Some(m) = page.into_iter().next() {
            return Ok(Some(m));
        }
        Ok(self
            .v1_messages(&session.id, Some(1))
            .and_then(|mut v| v.pop()))
    }

    fn messages(
        &self,
        session: &Session,
        last: Option<usize>,
        deadline: Instant,
    ) -> Result<(Vec<Message>, usize), ClientError> {
        let mut newest_first: Vec<Message> = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let (page, next) =
                self.v2_message_page(&session.id, self.page_sizes.1, cursor.as_deref())?;
            let n = page.len();
            newest_first.extend(page);
            match next {
                Some(c) if n > 0 && Some(&c) != cursor.as_ref() && Instant::now() < deadline => {
                    cursor = Some(c)
                }
                _ => break,
            }
        }
        let mut all: Vec<Message> = if newest_first.is_empty() {
            self.v1_messages(&session.id, None).unwrap_or_default()
        } else {
            newest_first.into_iter().rev().collect()
        };
        let total = all.len();
        keep_newest(&mut all, last);
        Ok((all, total))
    }
}

impl SessionSource for ApiSource {
    fn name(&self) -> &'static str {
        "api"
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
        let body = json!({ "title": title });
        let v2_path = format!("/api/session/{}", encode_component(id));
        let v2_ok = match self.cmd.call_json("PATCH", &v2_path, Some(&body)) {
            Ok(v) => v.pointer("/data/id").and_then(Value::as_str) == Some(id),
            // No such route on this service (404/405), or an answer that is not JSON; anything
            // else is a real failure.
            Err(ClientError::MalformedReply { .. })
            | Err(ClientError::NotFound { .. })
            | Err(ClientError::ServiceError {
                status: 404 | 405, ..
            }) => false,
            Err(e) => return Err(e),
        };
        if !v2_ok {
            let v1_path = format!(
                "/session/{}{}",
                encode_component(id),
                query(&[("directory", Some(before.directory.clone()))])
            );
            self.cmd.call_json("PATCH", &v1_path, Some(&body))?;
        }
        self.get(id, ctx)
    }
}

/// Whether a v2 message is part of the conversation: `user` and `assistant` are; the
/// `system` messages v2 inserts (skill lists, reminders) and the records of other kinds the
/// 2.0 preview keeps among them (an agent or model switched for a follow-up, *observed*) are
/// not shown and do not count. A message naming no kind is kept.
pub fn is_conversation_message(v: &Value) -> bool {
    match v
        .get("type")
        .or_else(|| v.get("role"))
        .and_then(Value::as_str)
    {
        Some(kind) => matches!(kind, "user" | "assistant"),
        None => true,
    }
}

/// A v2 session (`SessionV2Info`) → [`Session`], state not yet derived.
pub fn session_from_v2(v: &Value) -> Option<Session> {
    let directory = v
        .pointer("/location/directory")
        .or_else(|| v.get("directory"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    session_record(v, directory, v.get("model").and_then(model_v2))
}

/// A v2 message (`{id, type:"user", text, time}` or `{id, type:"assistant", agent, model,
/// content[], finish, cost, tokens, time, error?}`) → [`Message`].
///
/// Content items: `text` → [`Part::Text`]; `reasoning` → [`Part::Reasoning`]; `tool`
/// (`{name, state{status, input, content[], error?}}`) → [`Part::Tool`], output = the text of
/// its `content` items; anything else goes through the shared v1 part decoder (so v1-shaped
/// parts are understood too). A v2 error (`{type, message, status?}`) becomes a
/// [`MessageError`] named after its type (`unknown` → `UnknownError`, `provider` →
/// `ProviderError`), with `aborted` mapped to `MessageAbortedError` so the state rules see an
/// interrupted run. `system` messages are not conversation: filter them with
/// [`is_conversation_message`] first.
pub fn message_from_v2(v: &Value) -> Message {
    let role = match v
        .get("type")
        .or_else(|| v.get("role"))
        .and_then(Value::as_str)
    {
        Some("user") => Role::User,
        _ => Role::Assistant,
    };
    let time = v.get("time");
    let int = |k: &str| {
        time.and_then(|t| t.get(k))
            .and_then(Value::as_f64)
            .map(|f| f as i64)
    };
    let mut parts = Vec::new();
    if let Some(text) = v.get("text").and_then(Value::as_str) {
        parts.push(Part::Text {
            text: text.to_string(),
            synthetic: false,
            time_ms: int("created"),
        });
    }
    if let Some(items) = v.get("content").and_then(Value::as_array) {
        parts.extend(items.iter().map(content_from_v2));
    }
    Message {
        id: str_of(v, "id").unwrap_or_default(),
        role,
        agent: str_of(v, "agent"),
        model: v.get("model").and_then(model_v2),
        created_ms: int("created").unwrap_or(0),
        completed_ms: int("completed"),
        finish: str_of(v, "finish"),
        error: v.get("error").and_then(error_v2),
        tokens: v.get("tokens").map(decode_tokens).unwrap_or_default(),
        cost: v.get("cost").and_then(Value::as_f64).unwrap_or(0.0),
        parts,
    }
}

fn content_from_v2(c: &Value) -> Part {
    let time = c.get("time");
    let t = |k: &str| {
        time.and_then(|t| t.get(k))
            .and_then(Value::as_f64)
            .map(|f| f as i64)
    };
    match c.get("type").and_then(Value::as_str) {
        Some("text") => Part::Text {
            text: str_of(c, "text").unwrap_or_default(),
            synthetic: c.get("synthetic").and_then(Value::as_bool).unwrap_or(false),
            time_ms: t("completed").or_else(|| t("created")),
        },
        Some("reasoning") => Part::Reasoning,
        Some("tool") => {
            let state = c.get("state").unwrap_or(&Value::Null);
            let status = match state.get("status").and_then(Value::as_str) {
                Some("completed") => ToolStatus::Completed,
                Some("error") | Some("failed") => ToolStatus::Error,
                Some("running") => ToolStatus::Running,
                _ if state.get("error").is_some() => ToolStatus::Error,
                _ => ToolStatus::Pending,
            };
            let input = match state.get("input") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            let content_text = state.get("content").and_then(Value::as_array).map(|items| {
                items
                    .iter()
                    .filter_map(|i| i.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            let error_text = state.get("error").map(|e| match e {
                Value::String(s) => s.clone(),
                other => other
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| other.to_string()),
            });
            let output = match status {
                ToolStatus::Error => error_text.or(content_text),
                _ => content_text
                    .filter(|s| !s.is_empty())
                    .or_else(|| str_of(state, "output")),
            };
            Part::Tool {
                tool: str_of(c, "name")
                    .or_else(|| str_of(c, "tool"))
                    .unwrap_or_default(),
                status,
                input,
                output,
                time_ms: t("completed").or_else(|| t("ran")).or_else(|| t("created")),
            }
        }
        _ => decode_part(c),
    }
}

fn error_v2(e: &Value) -> Option<MessageError> {
    match e {
        Value::Null => None,
        Value::Object(_) if e.get("name").is_some() => crate::decode::decode_error(e),
        Value::Object(_) => {
            let kind = str_of(e, "type").unwrap_or_else(|| "unknown".into());
            let name = match kind.as_str() {
                "aborted" => "MessageAbortedError".to_string(),
                k if k.ends_with("Error") => k.to_string(),
                k => {
                    let mut c = k.chars();
                    let first = c.next().map(|f| f.to_ascii_uppercase()).unwrap_or('U');
                    format!("{first}{}Error", c.as_str())
                }
            };
            Some(MessageError {
                name,
                message: str_of(e, "message").unwrap_or_default(),
                status_code: e
                    .get("status")
                    .and_then(Value::as_u64)
                    .and_then(|n| u16::try_from(n).ok()),
            })
        }
        other => crate::decode::decode_error(other),
    }
}

/// `provider/model` from `{id, providerID}` / `{modelID, providerID}`, or a plain string.
fn model_v2(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Object(_) => model_of_json(v),
        _ => None,
    }
}
