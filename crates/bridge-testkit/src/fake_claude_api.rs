//! A fake Anthropic Messages API for delegated `claude -p` runs, where the **model name picks
//! the behaviour** (like [`crate::fake_llm`] does for opencode).
//!
//! In-process: a `std::net::TcpListener` on `127.0.0.1:0`, one thread per connection, a minimal
//! HTTP/1.1 (every response closes its connection). `POST /v1/messages` is answered by the
//! scenario its `model` names; `POST /v1/messages/count_tokens` gets `{"input_tokens":100}`;
//! anything else `200 {}`.
//!
//! | model | answer |
//! |---|---|
//! | `claude-fake-text` | text [`CLAUDE_OK_TEXT`] |
//! | `claude-fake-write` | a `Write` call of the file named by `WRITE_PATH=<abs path>` in the prompt (content [`WRITTEN`]), then text echoing the tool result |
//! | `claude-fake-read` | a `Read` call of `READ_PATH=<abs path>` from the prompt, then text echoing the tool result |
//! | `claude-fake-bash` | a `Bash` call running `BASH_CMD=<command>` from the prompt (to the end of its line), then text echoing the result |
//! | `claude-fake-slow` | streams a ping every 250 ms for 120 s, then text |
//! | `claude-fake-429` | 429 `rate_limit_error` with `retry-after: 1` and `anthropic-ratelimit-requests-reset` one hour ahead |
//! | `claude-fake-usage` | 429 with `anthropic-ratelimit-unified-status: rejected`, `anthropic-ratelimit-unified-reset` = [`USAGE_RESET_EPOCH`] and the message `Claude AI usage limit reached\|<that epoch>` (how a subscription limit is reported; with an API key Claude Code 2.1.328 passes only the message on) |
//! | `claude-fake-529` | 529 `overloaded_error` |
//! | `claude-fake-401` | 401 `authentication_error` |
//! | `claude-fake-long` | 400 `invalid_request_error` "prompt is too long" |
//!
//! A follow-up request whose last user message carries a `tool_result` is answered with the text
//! `tool result (error: <bool>): <the result's text>`. Requests without tools (side requests)
//! get [`CLAUDE_OK_TEXT`]. Every `/v1/messages` request is recorded ([`FakeClaudeApi::requests`]).

use crate::anthropic_api::{self, respond, respond_json};
use crate::http::{self, Server};
use serde_json::{Value, json};
use std::io::{self, BufReader, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The text of `claude-fake-text`.
pub const CLAUDE_OK_TEXT: &str = "Hello from fake Anthropic. DONE";
/// What `claude-fake-write` writes.
pub const WRITTEN: &str = "written by the fake model\n";
/// The reset time `claude-fake-usage` announces (2030-01-01T00:00:00Z).
pub const USAGE_RESET_EPOCH: u64 = 1_893_456_000;

/// One recorded `/v1/messages` request.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    /// `model` of the body.
    pub model: String,
    /// Names of the tools offered.
    pub tools: Vec<String>,
    /// The body.
    pub body: Value,
}

/// The running fake endpoint. Dropping it stops the listener.
pub struct FakeClaudeApi {
    server: Server,
    requests: Arc<Mutex<Vec<ApiRequest>>>,
}

impl std::fmt::Debug for FakeClaudeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeClaudeApi")
            .field("port", &self.server.port())
            .finish_non_exhaustive()
    }
}

impl FakeClaudeApi {
    /// Starts the endpoint on a free loopback port.
    pub fn start() -> io::Result<FakeClaudeApi> {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let rq = requests.clone();
        let server = Server::start("fake-claude-api", move |stream, stop| {
            let _ = handle(stream, &rq, stop);
        })?;
        Ok(FakeClaudeApi { server, requests })
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// Every `/v1/messages` request received, in order.
    pub fn requests(&self) -> Vec<ApiRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// The environment that points Claude Code at this endpoint, isolates it in `home` and
    /// keeps it offline otherwise (no telemetry, no updates, at most one internal retry).
    pub fn claude_env(&self, home: &std::path::Path) -> Vec<(String, String)> {
        let home = home.to_string_lossy().into_owned();
        let mut env = vec![
            ("HOME".to_string(), home.clone()),
            ("XDG_CONFIG_HOME".into(), format!("{home}/.config")),
            ("CLAUDE_CONFIG_DIR".into(), format!("{home}/.claude")),
        ];
        env.extend(anthropic_api::offline_claude_env(self.base_url()));
        env.push(("CLAUDE_CODE_MAX_RETRIES".into(), "1".into()));
        env
    }
}

/// An API error answer: `{"type": "error", "error": {"type": kind, "message": message}, ...}`.
fn respond_error(
    stream: &TcpStream,
    (status, reason): (u16, &str),
    headers: &[(&str, &str)],
    kind: &str,
    message: &str,
) -> io::Result<()> {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"});
    respond(
        stream,
        status,
        reason,
        "application/json",
        headers,
        body.to_string().as_bytes(),
    )
}

fn now_epoch() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Text of the first user message (the prompt).
fn prompt_text(body: &Value) -> String {
    let Some(first) = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.first())
    else {
        return String::new();
    };
    block_text(first.get("content").unwrap_or(&Value::Null))
}

fn block_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b.get("content") {
                Some(c) => block_text(c),
                None => b
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The value after `KEY=` in the prompt, up to the end of its line.
fn marker(prompt: &str, key: &str) -> String {
    prompt
        .split(&format!("{key}="))
        .nth(1)
        .map(|rest| rest.lines().next().unwrap_or("").trim().to_owned())
        .unwrap_or_default()
}

/// The tool_result of the last user message, as `(is_error, text)`.
fn last_tool_result(body: &Value) -> Option<(bool, String)> {
    let last = body.get("messages")?.as_array()?.last()?;
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let blocks = last.get("content")?.as_array()?;
    let r = blocks
        .iter()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))?;
    Some((
        r.get("is_error").and_then(Value::as_bool) == Some(true),
        block_text(r.get("content").unwrap_or(&Value::Null)),
    ))
}

fn handle(
    stream: TcpStream,
    requests: &Mutex<Vec<ApiRequest>>,
    stop: &AtomicBool,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let req = http::read_request(&mut BufReader::new(&stream))?.unwrap_or_default();
    match (req.method.as_str(), req.route()) {
        ("POST", "/v1/messages/count_tokens") => {
            return respond_json(&stream, br#"{"input_tokens":100}"#);
        }
        ("POST", "/v1/messages") => {}
        _ => return respond_json(&stream, b"{}"),
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let tools: Vec<String> = body
        .get("tools")
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    requests.lock().unwrap().push(ApiRequest {
        model: model.clone(),
        tools: tools.clone(),
        body: body.clone(),
    });
    let streaming = body.get("stream").and_then(Value::as_bool) == Some(true);
    // Error scenarios answer every request the same way.
    if model.contains("fake-429") {
        let reset = chrono_like(now_epoch() + 3600);
        return respond_error(
            &stream,
            (429, "Too Many Requests"),
            &[
                ("retry-after", "1"),
                ("anthropic-ratelimit-requests-reset", &reset),
            ],
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        );
    }
    if model.contains("fake-usage") {
        return respond_error(
            &stream,
            (429, "Too Many Requests"),
            &[
                ("anthropic-ratelimit-unified-status", "rejected"),
                (
                    "anthropic-ratelimit-unified-reset",
                    &USAGE_RESET_EPOCH.to_string(),
                ),
                (
                    "anthropic-ratelimit-unified-representative-claim",
                    "five_hour",
                ),
            ],
            "rate_limit_error",
            &format!("Claude AI usage limit reached|{USAGE_RESET_EPOCH}"),
        );
    }
    let plain_errors = [
        (
            "fake-529",
            (529, "Overloaded"),
            "overloaded_error",
            "Overloaded",
        ),
        (
            "fake-401",
            (401, "Unauthorized"),
            "authentication_error",
            "invalid x-api-key",
        ),
        (
            "fake-long",
            (400, "Bad Request"),
            "invalid_request_error",
            "prompt is too long: 250000 tokens > 200000 maximum",
        ),
    ];
    if let Some((_, status, kind, message)) = plain_errors.iter().find(|e| model.contains(e.0)) {
        return respond_error(&stream, *status, &[], kind, message);
    }
    let content: Value = if tools.is_empty() {
        json!({"type": "text", "text": CLAUDE_OK_TEXT})
    } else if let Some((is_error, text)) = last_tool_result(&body) {
        json!({"type": "text", "text": format!("tool result (error: {is_error}): {text}")})
    } else {
        let prompt = prompt_text(&body);
        if model.contains("fake-write") {
            json!({"type": "tool_use", "id": "toolu_fake_write", "name": "Write",
                "input": {"file_path": marker(&prompt, "WRITE_PATH"), "content": WRITTEN}})
        } else if model.contains("fake-read") {
            json!({"type": "tool_use", "id": "toolu_fake_read", "name": "Read",
                "input": {"file_path": marker(&prompt, "READ_PATH")}})
        } else if model.contains("fake-bash") {
            json!({"type": "tool_use", "id": "toolu_fake_bash", "name": "Bash",
                "input": {"command": marker(&prompt, "BASH_CMD"), "description": "run the command"}})
        } else {
            json!({"type": "text", "text": CLAUDE_OK_TEXT})
        }
    };
    let stop_reason = if content["type"] == "tool_use" {
        "tool_use"
    } else {
        "end_turn"
    };
    if !streaming {
        let msg = anthropic_api::message(&model, &content, stop_reason);
        return respond_json(&stream, msg.to_string().as_bytes());
    }
    let (pre, post) = anthropic_api::sse(&model, &content, stop_reason);
    let mut s = &stream;
    http::write_event_stream_head(s)?;
    s.write_all(pre.as_bytes())?;
    s.flush()?;
    if model.contains("fake-slow") && !tools.is_empty() {
        let until = Instant::now() + Duration::from_secs(120);
        while Instant::now() < until && !stop.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(250));
            if s.write_all(b"event: ping\ndata: {\"type\": \"ping\"}\n\n")
                .and_then(|_| s.flush())
                .is_err()
            {
                return Ok(());
            }
        }
    }
    s.write_all(post.as_bytes())?;
    s.flush()?;
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

/// RFC 3339 UTC time of an epoch second (no external crate).
fn chrono_like(epoch: u64) -> String {
    let days = epoch / 86_400;
    let secs = epoch % 86_400;
    // Civil-from-days (Howard Hinnant).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_known_epochs() {
        assert_eq!(chrono_like(0), "1970-01-01T00:00:00Z");
        assert_eq!(chrono_like(USAGE_RESET_EPOCH), "2030-01-01T00:00:00Z");
        assert_eq!(chrono_like(1_709_251_199), "2024-02-29T23:59:59Z");
    }

    #[test]
    fn markers_and_tool_results_are_read() {
        assert_eq!(
            marker("do it\nWRITE_PATH=/tmp/x y\nmore", "WRITE_PATH"),
            "/tmp/x y"
        );
        let body = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": true, "content": [{"type": "text", "text": "denied"}]}]}
        ]});
        assert_eq!(last_tool_result(&body), Some((true, "denied".into())));
    }
}
