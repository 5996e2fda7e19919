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

use serde_json::{Value, json};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
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
    port: u16,
    requests: Arc<Mutex<Vec<ApiRequest>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeClaudeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeClaudeApi")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl FakeClaudeApi {
    /// Starts the endpoint on a free loopback port.
    pub fn start() -> io::Result<FakeClaudeApi> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (rq, st) = (requests.clone(), stop.clone());
        let thread = thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let rq = rq.clone();
                        let st = st.clone();
                        thread::spawn(move || {
                            let _ = handle(stream, &rq, &st);
                        });
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(20));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(FakeClaudeApi {
            port,
            requests,
            stop,
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every `/v1/messages` request received, in order.
    pub fn requests(&self) -> Vec<ApiRequest> {
        self.requests.lock().unwrap().clone()
    }

    /// The environment that points Claude Code at this endpoint, isolates it in `home` and
    /// keeps it offline otherwise (no telemetry, no updates, at most one internal retry).
    pub fn claude_env(&self, home: &std::path::Path) -> Vec<(String, String)> {
        let home = home.to_string_lossy().into_owned();
        [
            ("HOME", home.clone()),
            ("XDG_CONFIG_HOME", format!("{home}/.config")),
            ("CLAUDE_CONFIG_DIR", format!("{home}/.claude")),
            ("ANTHROPIC_BASE_URL", self.base_url()),
            ("ANTHROPIC_API_KEY", "sk-ant-fake-key".to_string()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("CLAUDE_CODE_MAX_RETRIES", "1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}

impl Drop for FakeClaudeApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_request(stream: &TcpStream) -> io::Result<(String, String, Vec<u8>)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size)?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
    }
    Ok((method, path, body))
}

fn respond(
    mut stream: &TcpStream,
    status: &str,
    headers: &[(String, String)],
    content_type: &str,
    body: &[u8],
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nrequest-id: req_fake\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()?;
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

fn error_body(kind: &str, message: &str) -> Vec<u8> {
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"})
        .to_string()
        .into_bytes()
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
    let (method, path, body) = read_request(&stream)?;
    let path = path.split('?').next().unwrap_or("").to_string();
    if method == "POST" && path == "/v1/messages/count_tokens" {
        return respond(
            &stream,
            "200 OK",
            &[],
            "application/json",
            br#"{"input_tokens":100}"#,
        );
    }
    if !(method == "POST" && path == "/v1/messages") {
        return respond(&stream, "200 OK", &[], "application/json", b"{}");
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
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
    let h = |k: &str, v: String| (k.to_owned(), v);
    // Error scenarios answer every request the same way.
    if model.contains("fake-429") {
        let reset = chrono_like(now_epoch() + 3600);
        return respond(
            &stream,
            "429 Too Many Requests",
            &[
                h("retry-after", "1".into()),
                h("anthropic-ratelimit-requests-reset", reset),
            ],
            "application/json",
            &error_body(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
        );
    }
    if model.contains("fake-usage") {
        return respond(
            &stream,
            "429 Too Many Requests",
            &[
                h("anthropic-ratelimit-unified-status", "rejected".into()),
                h(
                    "anthropic-ratelimit-unified-reset",
                    USAGE_RESET_EPOCH.to_string(),
                ),
                h(
                    "anthropic-ratelimit-unified-representative-claim",
                    "five_hour".into(),
                ),
            ],
            "application/json",
            &error_body(
                "rate_limit_error",
                &format!("Claude AI usage limit reached|{USAGE_RESET_EPOCH}"),
            ),
        );
    }
    if model.contains("fake-529") {
        return respond(
            &stream,
            "529 Overloaded",
            &[],
            "application/json",
            &error_body("overloaded_error", "Overloaded"),
        );
    }
    if model.contains("fake-401") {
        return respond(
            &stream,
            "401 Unauthorized",
            &[],
            "application/json",
            &error_body("authentication_error", "invalid x-api-key"),
        );
    }
    if model.contains("fake-long") {
        return respond(
            &stream,
            "400 Bad Request",
            &[],
            "application/json",
            &error_body(
                "invalid_request_error",
                "prompt is too long: 250000 tokens > 200000 maximum",
            ),
        );
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
        let msg = json!({
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [content], "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}
        });
        return respond(
            &stream,
            "200 OK",
            &[],
            "application/json",
            msg.to_string().as_bytes(),
        );
    }
    let (pre, post) = sse(&model, &content, stop_reason);
    let mut s = &stream;
    write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
    )?;
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

/// The SSE of one message, split where a slow scenario pauses (after the block started).
fn sse(model: &str, content: &Value, stop: &str) -> (String, String) {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut pre = ev(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        }}),
    );
    let delta = if content["type"] == "tool_use" {
        let mut start = content.clone();
        start["input"] = json!({});
        pre.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ));
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": content["input"].to_string()}})
    } else {
        pre.push_str(&ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": content["text"]}})
    };
    let mut post = ev("content_block_delta", delta);
    post.push_str(&ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    post.push_str(&ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
    ));
    post.push_str(&ev("message_stop", json!({"type": "message_stop"})));
    (pre, post)
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
