//! An OpenAI-compatible fake LLM server that the real opencode talks to.
//!
//! In-process: a `std::net::TcpListener` on `127.0.0.1:0`, one thread per connection, a minimal
//! hand-written HTTP/1.1 (every response closes its connection). It answers
//! `GET /v1/models` and `POST /v1/chat/completions` (streamed as server-sent events:
//! `data: {chat.completion.chunk}` lines, a `finish_reason`, a `usage` chunk, `data: [DONE]`).
//!
//! The **model name picks the behaviour**, so one server serves every scenario (see [`SCENARIOS`]):
//!
//! | model | answer |
//! |---|---|
//! | `ok` | text [`OK_TEXT`] |
//! | `toolbash` | a `bash` call (`echo hello-from-bash`), then text once the tool result comes back |
//! | `toolwrite` | a `write` call creating `hello.txt` (content `hi from fake\n`) in the working directory named in the system prompt, then text |
//! | `toolplant` | a `bash` call that plants repository code into the working directory's `.git` ([`PLANT_COMMAND`]: `core.fsmonitor`, a clean/smudge filter named in `.git/info/attributes`, a `post-checkout` hook, each touching `ran-<what>` in that directory when run) and writes the ignored `target/planted.log`, then text |
//! | `toolread-denied` | a `read` of `/nonexistent/file.txt` (needs `external_directory`, auto-rejected by `opencode run`) |
//! | `tooltask` | a `task` call (subagent `general`, prompt `do the sub job`); the subagent's request gets `sub job result` |
//! | `toolbad` | a call of the unknown tool `nosuchtool`, then text |
//! | `slow`, `slow<N>` | streams a word every 250 ms for [`FakeLlm::set_slow_secs`] seconds (default 30) or N seconds, then `DONE` |
//! | `hang` | never answers (keeps the connection open until the client goes away) |
//! | `e400` `e401` `e403` `e404` | HTTP errors with OpenAI-style bodies (`e404` = `model_not_found`) |
//! | `e429` `equota` | 429 `rate_limit_exceeded` / `insufficient_quota` |
//! | `e429wait` | 429 `rate_limit_exceeded` with `retry-after-ms: 60000`: opencode sits in its retry wait (for abort tests) |
//! | `e429huge` `e429e308` `e429neg` `e429nan` | 429 `rate_limit_exceeded` with the extreme `retry-after` of [`EXTREME_RETRY_AFTER`] (`18446744073709551615`, `1e308`, `-1`, `NaN`) and no `retry-after-ms` |
//! | `tool429wait` | a `bash` call, then `e429wait` once the tool result comes back |
//! | `e529` | 529 Anthropic-style `overloaded_error` |
//! | `e500` `e503` | server errors |
//! | `ectx` | 400 `context_length_exceeded` on every request with tools |
//! | `ectx1` | the same once per server, then like `ok` |
//! | `midstream` | one text chunk, then an `{"error":…}` chunk |
//! | `length` | text `truncated answ` with `finish_reason: "length"` |
//! | `reasoning` | `reasoning_content` `Let me think. OK.`, then text [`OK_TEXT`] |
//! | `long` | a text of [`LONG_BYTES`] bytes (numbered lines of words) streamed in deltas of [`LONG_DELTA`] bytes, ending with `DONE` (a long answer, for measuring the cost of its events) |
//! | `script` | the tool calls the prompt's `CALL <tool> <json>` lines name, one per turn, then text (its last `SAY <text>` line's; see `script`) |
//! | `undo` | tries to write past a read-only run's config, one way per turn (see [`UNDO_FILES`]): `bash` `printf hi > …`, `bash` `echo hi > …`, the `write` tool, the project's custom tool `scribble` and the MCP tool `scribe_write`, then text |
//! | `huge` | like `long`, but [`HUGE_BYTES`] bytes in deltas of [`HUGE_DELTA`] bytes (an answer whose event line is larger than any pipe) |
//!
//! Tool calls are written in opencode 1's names and renamed to what the request's tools take
//! (`speak_offered_tools`): `filePath` → `path` where a tool takes `path` (opencode 2's
//! `write`, `edit`, `read`), `bash` → `shell` and `task` → `subagent` where only those are
//! offered (upstream's 2.x), so every scenario serves both lines.
//!
//! Retryable errors (429, 5xx, 529) carry `retry-after-ms: 10` so opencode retries at once.
//! Requests without `tools` (title generation, compaction) get the text [`TITLE_TEXT`] whatever
//! the model. A follow-up request whose last message is a tool result gets text: `tooltask` →
//! `Task finished. DONE`, others → [`OK_TEXT`]. Every request is recorded ([`FakeLlm::requests`]).

use crate::http::{self, reason_phrase};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The models answering 429 with an extreme `retry-after` (and no `retry-after-ms`), and the
/// value each sends: the largest u64, a float past any duration, a negative and a NaN.
pub const EXTREME_RETRY_AFTER: &[(&str, &str)] = &[
    ("e429huge", "18446744073709551615"),
    ("e429e308", "1e308"),
    ("e429neg", "-1"),
    ("e429nan", "NaN"),
];

/// The text of the `ok` scenario (and of most follow-ups).
pub const OK_TEXT: &str = "Hello from the fake. DONE";
/// The answer to requests without tools (title generation, compaction).
pub const TITLE_TEXT: &str = "Fake title";
/// The text a `tooltask` subagent answers with.
pub const SUBTASK_TEXT: &str = "sub job result";
/// Bytes of the `long` model's answer.
pub const LONG_BYTES: usize = 1024 * 1024;
/// Bytes of one streamed delta of the `long` model's answer.
pub const LONG_DELTA: usize = 64;
/// Bytes of the `huge` model's answer.
pub const HUGE_BYTES: usize = 3 * 1024 * 1024;
/// Bytes of one streamed delta of the `huge` model's answer.
pub const HUGE_DELTA: usize = 4096;

/// Every model name the fake knows (declare them all in the opencode config).
pub const SCENARIOS: &[&str] = &[
    "ok",
    "toolbash",
    "toolwrite",
    "toolplant",
    "toolread-denied",
    "tooltask",
    "toolbad",
    "slow",
    "slow3",
    "hang",
    "e400",
    "e401",
    "e403",
    "e404",
    "e429",
    "e429wait",
    "e429huge",
    "e429e308",
    "e429neg",
    "e429nan",
    "tool429wait",
    "equota",
    "e529",
    "e500",
    "e503",
    "ectx",
    "ectx1",
    "midstream",
    "length",
    "reasoning",
    "long",
    "huge",
    "escape",
    "script",
    "undo",
];

/// Files the `escape` model tries to create in the working directory, one per way of writing:
/// the write tool, a shell allowlisted as `timeout *`, one allowlisted as `echo*`, and a
/// `general` subagent started through the task tool.
pub const ESCAPE_FILES: [&str; 4] = [
    "escape-write.txt",
    "escape-timeout.txt",
    "escape-echo.txt",
    "escape-sub.txt",
];

/// The shell command of the `toolplant` model, run by opencode's `bash` tool in the working
/// directory: each planted command, if anything ever runs it, touches `$PWD/ran-<what>`.
pub const PLANT_COMMAND: &str = r#"mkdir -p target .git/hooks .git/info && git config core.fsmonitor "touch $PWD/ran-fsmonitor; false" && git config filter.evil.clean "touch $PWD/ran-clean; cat" && git config filter.evil.smudge "touch $PWD/ran-smudge; cat" && printf '*.md filter=evil\n' > .git/info/attributes && printf '#!/bin/sh\ntouch %s/ran-hook\n' "$PWD" > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout && echo planted > target/planted.log"#;
/// Files the `undo` model writes in the working directory through the shell and the write tool:
/// `printf hi >` (a shell allowlist `printf *` from the config's `mode` key), `echo hi >` (an
/// allowlist `echo *` under a glob key `b*sh`), and the write tool. It also calls the custom tool
/// [`UNDO_CUSTOM_TOOL`] and the MCP tool [`UNDO_MCP_TOOL`], which write where the test made them.
pub const UNDO_FILES: [&str; 3] = ["undo-printf.txt", "undo-echo.txt", "undo-write.txt"];
/// The custom tool the `undo` model calls (a project's `.opencode/tool/scribble.js`).
pub const UNDO_CUSTOM_TOOL: &str = "scribble";
/// The MCP tool the `undo` model calls (tool `write` of an MCP server named `scribe`).
pub const UNDO_MCP_TOOL: &str = "scribe_write";

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Raw body text.
    pub body: String,
    /// The body parsed as JSON, when it is JSON.
    pub json: Option<Value>,
}

impl RecordedRequest {
    /// The `model` field of a chat request.
    pub fn model(&self) -> Option<&str> {
        self.json.as_ref()?.get("model")?.as_str()
    }

    /// Whether the request offered tools (false for title generation and compaction).
    pub fn has_tools(&self) -> bool {
        has_tools(self.json.as_ref())
    }

    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
struct Shared {
    stop: AtomicBool,
    slow_secs: AtomicU64,
    requests: Mutex<Vec<RecordedRequest>>,
    counters: Mutex<HashMap<String, u32>>,
}

/// The running fake server. Dropping it stops the server.
#[derive(Debug)]
pub struct FakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FakeLlm {
    /// Starts a server on `127.0.0.1` with a free port.
    pub fn start() -> io::Result<FakeLlm> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            slow_secs: AtomicU64::new(30),
            requests: Mutex::new(Vec::new()),
            counters: Mutex::new(HashMap::new()),
        });
        let s = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fake-llm-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = conn else { continue };
                    let s2 = Arc::clone(&s);
                    let _ = thread::Builder::new()
                        .name("fake-llm-conn".into())
                        .spawn(move || {
                            let _ = serve_connection(stream, &s2);
                        });
                }
            })?;
        Ok(FakeLlm {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT/v1`, the provider `baseURL`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.addr.port())
    }

    /// How long the `slow` model streams (default 30 s).
    pub fn set_slow_secs(&self, secs: u64) {
        self.shared.slow_secs.store(secs, Ordering::SeqCst);
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The chat requests for one model, oldest first.
    pub fn chat_requests(&self, model: &str) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions") && r.model() == Some(model))
            .collect()
    }

    /// Waits until `pred` holds for the recorded requests, or `timeout` passes. Returns whether
    /// it held.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[RecordedRequest]) -> bool) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if pred(&lock(&self.shared.requests)) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn has_tools(json: Option<&Value>) -> bool {
    json.and_then(|j| j.get("tools"))
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

// ---------------------------------------------------------------------------------------------
// HTTP

fn serve_connection(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some(req) = read_request(&mut reader)? else {
        return Ok(());
    };
    lock(&shared.requests).push(req.clone());
    let mut out = stream;
    match (
        req.method.as_str(),
        req.path.split('?').next().unwrap_or(""),
    ) {
        ("GET", p) if p.ends_with("/models") => {
            let data: Vec<Value> = SCENARIOS
                .iter()
                .map(|m| json!({"id": m, "object": "model", "created": 0, "owned_by": "fake"}))
                .collect();
            write_json(
                &mut out,
                200,
                &json!({"object": "list", "data": data}),
                None,
            )
        }
        ("POST", p) if p.ends_with("/chat/completions") => {
            let plan = speak_offered_tools(plan(&req, shared), req.json.as_ref());
            play(&mut out, plan, shared)
        }
        _ => write_json(
            &mut out,
            404,
            &json!({"error": {"message": format!("no route {} {}", req.method, req.path), "type": "invalid_request_error"}}),
            None,
        ),
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> io::Result<Option<RecordedRequest>> {
    let Some(req) = http::read_request(reader)? else {
        return Ok(None);
    };
    let body = String::from_utf8_lossy(&req.body).into_owned();
    let json = serde_json::from_str(&body).ok();
    Ok(Some(RecordedRequest {
        method: req.method,
        path: req.path,
        headers: req.headers,
        body,
        json,
    }))
}

fn write_json(
    out: &mut TcpStream,
    status: u16,
    body: &Value,
    retry_after_ms: Option<u64>,
) -> io::Result<()> {
    let retry = retry_after_ms.map(|ms| ms.to_string());
    let mut headers = vec![("connection", "close")];
    if let Some(ms) = &retry {
        headers.push(("retry-after-ms", ms));
    }
    http::respond(
        out,
        status,
        reason_phrase(status),
        "application/json",
        &headers,
        body.to_string().as_bytes(),
    )
}

// ---------------------------------------------------------------------------------------------
// Scenarios

enum Plan {
    Error {
        status: u16,
        body: Value,
        retry_after_ms: Option<u64>,
    },
    /// A 429 with this raw `retry-after` value.
    RetryAfter(&'static str),
    Stream {
        model: String,
        events: Vec<Event>,
    },
    Slow {
        model: String,
        secs: u64,
    },
    Hang,
}

enum Event {
    Text(String),
    Reasoning(String),
    ToolCall {
        name: String,
        args: Value,
    },
    RawError(Value),
    Finish(&'static str),
    Usage {
        prompt: u64,
        completion: u64,
        cached: u64,
    },
}

fn text_answer(text: &str, finish: &'static str) -> Vec<Event> {
    vec![
        Event::Text(text.to_string()),
        Event::Finish(finish),
        Event::Usage {
            prompt: 10,
            completion: 3,
            cached: 2,
        },
    ]
}

/// The `long` and `huge` answers: `bytes` of numbered lines in deltas of `delta` bytes, ending
/// with `DONE`.
fn long_answer(bytes: usize, delta: usize) -> Vec<Event> {
    let mut text = String::with_capacity(bytes + 64);
    let mut n = 0u64;
    while text.len() < bytes - 4 {
        text.push_str(&format!(
            "{n}: the quick brown fox jumps over the lazy dog, and back again.\n"
        ));
        n += 1;
    }
    text.truncate(bytes - 4);
    text.push_str("DONE");
    let mut events: Vec<Event> = text
        .as_bytes()
        .chunks(delta)
        .map(|c| Event::Text(String::from_utf8_lossy(c).into_owned()))
        .collect();
    events.push(Event::Finish("stop"));
    events.push(Event::Usage {
        prompt: 10,
        completion: (bytes / 4) as u64,
        cached: 0,
    });
    events
}

fn tool_answer(name: &str, args: Value) -> Vec<Event> {
    vec![
        Event::ToolCall {
            name: name.to_string(),
            args,
        },
        Event::Finish("tool_calls"),
        Event::Usage {
            prompt: 20,
            completion: 8,
            cached: 0,
        },
    ]
}

fn openai_error(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

/// A 429 whose `retry-after-ms` asks for a minute's wait.
fn rate_limited_for_a_minute() -> Plan {
    Plan::Error {
        status: 429,
        body: openai_error(
            "Rate limit reached for requests",
            "requests",
            Some("rate_limit_exceeded"),
        ),
        retry_after_ms: Some(60_000),
    }
}

/// The tools a request offers, by name, with the argument names of each.
fn offered_tools(body: Option<&Value>) -> Vec<(String, Vec<String>)> {
    body.and_then(|b| b.get("tools"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let f = t.get("function")?;
            let name = f.get("name")?.as_str()?.to_owned();
            let args = f
                .pointer("/parameters/properties")
                .and_then(Value::as_object)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            Some((name, args))
        })
        .collect()
}

/// A scenario's tool calls in the names the request's tools use: opencode 2 names `write`'s
/// and `edit`'s and `read`'s file `path` (1.x: `filePath`), and upstream's 2.x calls `bash`
/// `shell` and `task` `subagent`. Scenarios are written in 1.x's names; a call is renamed only
/// when the request offers the 2.x name and not the 1.x one.
fn speak_offered_tools(plan: Plan, body: Option<&Value>) -> Plan {
    let Plan::Stream { model, events } = plan else {
        return plan;
    };
    let tools = offered_tools(body);
    let offers = |n: &str| tools.iter().any(|(t, _)| t == n);
    let events = events
        .into_iter()
        .map(|e| match e {
            Event::ToolCall { name, mut args } => {
                let name = match name.as_str() {
                    "bash" if !offers("bash") && offers("shell") => "shell".to_owned(),
                    "task" if !offers("task") && offers("subagent") => "subagent".to_owned(),
                    _ => name,
                };
                let takes = |a: &str| {
                    tools
                        .iter()
                        .any(|(t, args)| *t == name && args.iter().any(|x| x == a))
                };
                if takes("path")
                    && !takes("filePath")
                    && let Some(obj) = args.as_object_mut()
                    && let Some(v) = obj.remove("filePath")
                {
                    obj.insert("path".into(), v);
                }
                Event::ToolCall { name, args }
            }
            other => other,
        })
        .collect();
    Plan::Stream { model, events }
}

fn plan(req: &RecordedRequest, shared: &Shared) -> Plan {
    let body = req.json.as_ref();
    let model = req.model().unwrap_or("ok").to_string();
    let stream = |events| Plan::Stream {
        model: model.clone(),
        events,
    };
    if !has_tools(body) {
        return stream(text_answer(TITLE_TEXT, "stop"));
    }
    let messages: &[Value] = body
        .and_then(|b| b.get("messages"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let after_tool = messages
        .last()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("tool");
    let err = |status: u16, body: Value| Plan::Error {
        status,
        retry_after_ms: (status == 429 || status >= 500).then_some(10),
        body,
    };
    let ctx_error = || {
        err(
            400,
            openai_error(
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 200000 tokens. Please reduce the length of the messages.",
                "invalid_request_error",
                Some("context_length_exceeded"),
            ),
        )
    };
    match model.as_str() {
        "e400" => err(
            400,
            openai_error(
                "Invalid request: bad parameter.",
                "invalid_request_error",
                None,
            ),
        ),
        "e401" => err(
            401,
            openai_error(
                "Incorrect API key provided: sk-xxx.",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
        ),
        "e403" => err(
            403,
            openai_error(
                "You are not allowed to access this model.",
                "invalid_request_error",
                Some("permission_denied"),
            ),
        ),
        "e404" => err(
            404,
            openai_error(
                "The model `gpt-9` does not exist or you do not have access to it.",
                "invalid_request_error",
                Some("model_not_found"),
            ),
        ),
        "e429" => err(
            429,
            openai_error(
                "Rate limit reached for requests",
                "requests",
                Some("rate_limit_exceeded"),
            ),
        ),
        "equota" => err(
            429,
            openai_error(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                Some("insufficient_quota"),
            ),
        ),
        "e529" => err(
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        "e500" => err(
            500,
            openai_error("Internal server error", "server_error", None),
        ),
        "e503" => err(
            503,
            openai_error("Service Unavailable", "server_error", None),
        ),
        "e429wait" => rate_limited_for_a_minute(),
        m if EXTREME_RETRY_AFTER.iter().any(|(n, _)| *n == m) => {
            let (_, v) = EXTREME_RETRY_AFTER.iter().find(|(n, _)| *n == m).unwrap();
            Plan::RetryAfter(v)
        }
        "tool429wait" if after_tool => rate_limited_for_a_minute(),
        "tool429wait" => stream(tool_answer(
            "bash",
            json!({"command": "echo hello-from-bash", "description": "Print greeting"}),
        )),
        "ectx" => ctx_error(),
        "ectx1" => {
            let mut counters = lock(&shared.counters);
            let n = counters.entry("ectx1".into()).or_insert(0);
            *n += 1;
            if *n == 1 {
                ctx_error()
            } else {
                stream(text_answer(OK_TEXT, "stop"))
            }
        }
        "hang" => Plan::Hang,
        m if m.starts_with("slow") => {
            let secs = m[4..]
                .parse::<u64>()
                .unwrap_or_else(|_| shared.slow_secs.load(Ordering::SeqCst));
            Plan::Slow {
                model: model.clone(),
                secs,
            }
        }
        "midstream" => stream(vec![
            Event::Text("partial ".into()),
            Event::RawError(
                json!({"error": {"message": "upstream model crashed", "type": "server_error", "code": "server_error"}}),
            ),
        ]),
        "length" => stream(text_answer("truncated answ", "length")),
        "long" => stream(long_answer(LONG_BYTES, LONG_DELTA)),
        "huge" => stream(long_answer(HUGE_BYTES, HUGE_DELTA)),
        "reasoning" => {
            let mut events = vec![Event::Reasoning("Let me think. OK.".into())];
            events.extend(text_answer(OK_TEXT, "stop"));
            stream(events)
        }
        "escape" => escape(req, messages),
        "script" => script(messages),
        "undo" => undo(req, messages),
        _ if after_tool => {
            let text = if model == "tooltask" {
                "Task finished. DONE"
            } else {
                OK_TEXT
            };
            stream(text_answer(text, "stop"))
        }
        "toolbash" => stream(tool_answer(
            "bash",
            json!({"command": "echo hello-from-bash", "description": "Print greeting"}),
        )),
        "toolwrite" => {
            let path = working_directory(req)
                .map(|d| format!("{}/hello.txt", d.trim_end_matches('/')))
                .unwrap_or_else(|| "hello.txt".into());
            stream(tool_answer(
                "write",
                json!({"filePath": path, "content": "hi from fake\n"}),
            ))
        }
        "toolplant" => stream(tool_answer(
            "bash",
            json!({"command": PLANT_COMMAND, "description": "Plant repository code"}),
        )),
        "toolread-denied" => stream(tool_answer(
            "read",
            json!({"filePath": "/nonexistent/file.txt"}),
        )),
        "toolbad" => stream(tool_answer("nosuchtool", json!({"x": 1}))),
        "tooltask" => {
            let last_user = messages
                .iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .map(Value::to_string)
                .unwrap_or_default();
            if last_user.contains("do the sub job") {
                stream(text_answer(SUBTASK_TEXT, "stop"))
            } else {
                stream(tool_answer(
                    "task",
                    json!({"description": "Sub job", "prompt": "do the sub job", "subagent_type": "general"}),
                ))
            }
        }
        _ => stream(text_answer(OK_TEXT, "stop")),
    }
}

/// The `script` model: the prompt scripts it. Every line of the user messages that starts with
/// `CALL <tool> <json arguments>` is one tool call, made in order, one per turn (the n-th turn
/// after n tool results); then the text of the last `SAY <text>` line, or `Script finished.
/// DONE` without one. A subagent started with a
/// `task` call whose prompt holds `CALL` lines of its own follows those in its session. So a
/// test makes an agent call any tool with any arguments, e.g.
/// `CALL bash {"command": "touch /tmp/x", "description": "attack"}`.
fn script(messages: &[Value]) -> Plan {
    let model = "script".to_owned();
    let text_of = |m: &Value| -> String {
        match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    };
    let calls: Vec<(String, Value)> = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .flat_map(|m| {
            text_of(m)
                .lines()
                .filter_map(|l| {
                    let rest = l.trim().strip_prefix("CALL ")?;
                    let (tool, args) = rest.split_once(' ')?;
                    Some((tool.to_owned(), serde_json::from_str(args.trim()).ok()?))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let done = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .count();
    // The final text: the last `SAY <text>` line of the user messages, if any.
    let said = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .flat_map(|m| {
            text_of(m)
                .lines()
                .filter_map(|l| l.trim().strip_prefix("SAY ").map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .next_back();
    let events = match calls.get(done) {
        Some((tool, args)) => tool_answer(tool, args.clone()),
        None => text_answer(said.as_deref().unwrap_or("Script finished. DONE"), "stop"),
    };
    Plan::Stream { model, events }
}

/// The `Working directory: …` line opencode puts in its system prompt.
/// The `escape` model: one way of writing a file per turn (see [`ESCAPE_FILES`]), whatever
/// tools are offered (a tool that is not offered comes back as an error and the next is tried),
/// then a final answer. In the subagent's own session it writes its file and ends.
fn escape(req: &RecordedRequest, messages: &[Value]) -> Plan {
    let model = "escape".to_owned();
    let stream = |events| Plan::Stream {
        model: model.clone(),
        events,
    };
    let done = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .count();
    let sub = messages.iter().any(|m| {
        m.get("role").and_then(Value::as_str) == Some("user")
            && m.to_string().contains("escape sub job")
    });
    let dir = working_directory(req).unwrap_or_else(|| ".".into());
    let file = |name: &str| format!("{}/{name}", dir.trim_end_matches('/'));
    let write = |name: &str| {
        tool_answer(
            "write",
            json!({"filePath": file(name), "content": "written by the escape model\n"}),
        )
    };
    match (sub, done) {
        (true, 0) => stream(write(ESCAPE_FILES[3])),
        (false, 0) => stream(write(ESCAPE_FILES[0])),
        (false, 1) => stream(tool_answer(
            "bash",
            json!({"command": format!("timeout 5 sh -c \"echo hi > {}\"", ESCAPE_FILES[1]), "description": "Write through timeout"}),
        )),
        (false, 2) => stream(tool_answer(
            "bash",
            json!({"command": format!("echo hi > {}", ESCAPE_FILES[2]), "description": "Write through echo"}),
        )),
        (false, 3) => stream(tool_answer(
            "task",
            json!({"description": "Escape sub job", "prompt": "escape sub job: write your file", "subagent_type": "general"}),
        )),
        _ => stream(text_answer("Tried every way of writing. DONE", "stop")),
    }
}

/// The `undo` model: one way of writing past a read-only config per turn (see [`UNDO_FILES`]),
/// whatever tools are offered (a tool that is not offered comes back as an error and the next
/// is tried), then a final answer.
fn undo(req: &RecordedRequest, messages: &[Value]) -> Plan {
    let model = "undo".to_owned();
    let done = messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .count();
    let dir = working_directory(req).unwrap_or_else(|| ".".into());
    let file = |name: &str| format!("{}/{name}", dir.trim_end_matches('/'));
    let events = match done {
        0 => tool_answer(
            "bash",
            json!({"command": format!("printf hi > {}", file(UNDO_FILES[0])), "description": "Write through printf"}),
        ),
        1 => tool_answer(
            "bash",
            json!({"command": format!("echo hi > {}", file(UNDO_FILES[1])), "description": "Write through echo"}),
        ),
        2 => tool_answer(
            "write",
            json!({"filePath": file(UNDO_FILES[2]), "content": "written by the undo model\n"}),
        ),
        3 => tool_answer(UNDO_CUSTOM_TOOL, json!({})),
        4 => tool_answer(UNDO_MCP_TOOL, json!({})),
        _ => text_answer("Tried every way past read-only. DONE", "stop"),
    };
    Plan::Stream { model, events }
}

fn working_directory(req: &RecordedRequest) -> Option<String> {
    let marker = "Working directory: ";
    let messages = req.json.as_ref()?.get("messages")?.as_array()?;
    for m in messages {
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => continue,
        };
        if let Some(i) = text.find(marker) {
            let rest = &text[i + marker.len()..];
            let end = rest.find(['\n', '\\', '<']).unwrap_or(rest.len());
            let dir = rest[..end].trim();
            if !dir.is_empty() {
                return Some(dir.to_string());
            }
        }
    }
    None
}

struct Sse<'a> {
    out: &'a mut TcpStream,
    id: String,
    model: String,
    created: u64,
}

impl Sse<'_> {
    fn start<'a>(out: &'a mut TcpStream, model: &str) -> io::Result<Sse<'a>> {
        http::write_event_stream_head(out)?;
        out.flush()?;
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Ok(Sse {
            out,
            id: format!("chatcmpl-fake{created}"),
            model: model.to_string(),
            created,
        })
    }

    fn raw(&mut self, v: &Value) -> io::Result<()> {
        self.out.write_all(format!("data: {v}\n\n").as_bytes())?;
        self.out.flush()
    }

    fn chunk(&mut self, delta: Value, finish: Option<&str>) -> io::Result<()> {
        let v = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        });
        self.raw(&v)
    }

    fn event(&mut self, e: &Event) -> io::Result<()> {
        match e {
            Event::Text(t) => self.chunk(json!({"role": "assistant", "content": t}), None),
            Event::Reasoning(t) => self.chunk(
                json!({"role": "assistant", "content": "", "reasoning_content": t}),
                None,
            ),
            Event::ToolCall { name, args } => self.chunk(
                json!({"role": "assistant", "content": null, "tool_calls": [{
                    "index": 0, "id": "call_abc123", "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}}]}),
                None,
            ),
            Event::RawError(v) => self.raw(v),
            Event::Finish(reason) => self.chunk(json!({}), Some(reason)),
            Event::Usage {
                prompt,
                completion,
                cached,
            } => {
                let v = json!({
                    "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                              "total_tokens": prompt + completion,
                              "prompt_tokens_details": {"cached_tokens": cached}}
                });
                self.raw(&v)
            }
        }
    }

    fn done(self) -> io::Result<()> {
        self.out.write_all(b"data: [DONE]\n\n")?;
        self.out.flush()?;
        let _ = self.out.shutdown(Shutdown::Write);
        Ok(())
    }
}

fn play(out: &mut TcpStream, plan: Plan, shared: &Shared) -> io::Result<()> {
    match plan {
        Plan::Error {
            status,
            body,
            retry_after_ms,
        } => write_json(out, status, &body, retry_after_ms),
        Plan::RetryAfter(value) => http::respond(
            out,
            429,
            reason_phrase(429),
            "application/json",
            &[("connection", "close"), ("retry-after", value)],
            openai_error(
                "Rate limit reached for requests",
                "requests",
                Some("rate_limit_exceeded"),
            )
            .to_string()
            .as_bytes(),
        ),
        Plan::Stream { model, events } => {
            let mut sse = Sse::start(out, &model)?;
            let mut errored = false;
            for e in &events {
                sse.event(e)?;
                errored |= matches!(e, Event::RawError(_));
            }
            if errored {
                let _ = sse.out.shutdown(Shutdown::Both);
                Ok(())
            } else {
                sse.done()
            }
        }
        Plan::Slow { model, secs } => {
            let mut sse = Sse::start(out, &model)?;
            let end = Instant::now() + Duration::from_secs(secs);
            let mut n = 0u64;
            while Instant::now() < end {
                if shared.stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                sse.event(&Event::Text(format!("tick{n} ")))?;
                n += 1;
                thread::sleep(Duration::from_millis(250));
            }
            for e in text_answer("DONE", "stop") {
                sse.event(&e)?;
            }
            sse.done()
        }
        Plan::Hang => {
            // Keep the connection open until the client closes it or the server stops.
            out.set_read_timeout(Some(Duration::from_millis(100)))?;
            let mut buf = [0u8; 256];
            loop {
                if shared.stop.load(Ordering::SeqCst) {
                    return Ok(());
                }
                match out.read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => return Ok(()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(llm: &FakeLlm, body: &Value) -> (u16, String, String) {
        let resp = http::post_json(llm.port(), "/v1/chat/completions", body);
        let (head, body) = resp.split_once("\r\n\r\n").unwrap();
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        (status, head.to_string(), body.to_string())
    }

    fn req(model: &str, messages: Value) -> Value {
        json!({"model": model, "stream": true, "messages": messages,
               "tools": [{"type": "function", "function": {"name": "bash"}}]})
    }

    #[test]
    fn long_streams_its_text_in_small_deltas() {
        let llm = FakeLlm::start().unwrap();
        let (status, _, body) = post(
            &llm,
            &req("long", json!([{"role": "user", "content": "hi"}])),
        );
        assert_eq!(status, 200);
        let mut text = String::new();
        let mut deltas = 0;
        for line in body.lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if let Some(t) = v
                .pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
            {
                assert!(t.len() <= LONG_DELTA);
                text.push_str(t);
                deltas += 1;
            }
        }
        assert_eq!(text.len(), LONG_BYTES);
        assert!(text.starts_with("0: the quick brown fox"));
        assert!(text.ends_with("DONE"));
        assert_eq!(deltas, LONG_BYTES.div_ceil(LONG_DELTA));
        assert!(body.contains("\"finish_reason\":\"stop\""));
    }

    #[test]
    fn ok_streams_text_usage_and_done() {
        let llm = FakeLlm::start().unwrap();
        let (status, head, body) =
            post(&llm, &req("ok", json!([{"role": "user", "content": "hi"}])));
        assert_eq!(status, 200);
        assert!(head.contains("text/event-stream"));
        assert!(body.contains(OK_TEXT));
        assert!(body.contains("\"finish_reason\":\"stop\""));
        assert!(body.contains("\"prompt_tokens\":10"));
        assert!(body.trim_end().ends_with("data: [DONE]"));
        let reqs = llm.chat_requests("ok");
        assert_eq!(reqs.len(), 1);
        assert!(reqs[0].has_tools());
    }

    #[test]
    fn tool_then_text_after_tool_result() {
        let llm = FakeLlm::start().unwrap();
        let (_, _, first) = post(
            &llm,
            &req("toolbash", json!([{"role": "user", "content": "go"}])),
        );
        assert!(first.contains("\"name\":\"bash\""));
        assert!(first.contains("tool_calls"));
        let (_, _, second) = post(
            &llm,
            &req(
                "toolbash",
                json!([{"role": "user", "content": "go"}, {"role": "tool", "content": "hello"}]),
            ),
        );
        assert!(second.contains(OK_TEXT));
    }

    #[test]
    fn toolwrite_uses_working_directory_from_system_prompt() {
        let llm = FakeLlm::start().unwrap();
        let (_, _, body) = post(
            &llm,
            &req(
                "toolwrite",
                json!([{"role": "system", "content": "x\n<env>\n  Working directory: /tmp/p q\n  Is directory a git repo: no\n"},
                       {"role": "user", "content": "write"}]),
            ),
        );
        assert!(
            body.contains(r#"\"filePath\":\"/tmp/p q/hello.txt\""#),
            "{body}"
        );
    }

    /// opencode 2's `write` takes `path`; upstream's 2.x offers `shell`, not `bash`.
    #[test]
    fn tool_calls_take_the_argument_names_the_request_offers() {
        let llm = FakeLlm::start().unwrap();
        let system = json!({"role": "system", "content": "<env>\n  Working directory: /w\n"});
        let v2_tools = json!([
            {"type": "function", "function": {"name": "write", "parameters": {"properties": {"path": {}, "content": {}}}}},
            {"type": "function", "function": {"name": "shell", "parameters": {"properties": {"command": {}}}}}
        ]);
        let ask = |model: &str| {
            json!({"model": model, "stream": true, "tools": v2_tools,
                   "messages": [system, {"role": "user", "content": "go"}]})
        };
        let (_, _, body) = post(&llm, &ask("toolwrite"));
        assert!(body.contains(r#"\"path\":\"/w/hello.txt\""#), "{body}");
        assert!(!body.contains("filePath"), "{body}");
        let (_, _, body) = post(&llm, &ask("toolbash"));
        assert!(body.contains(r#""name":"shell""#), "{body}");
    }

    #[test]
    fn errors_carry_status_and_retry_header() {
        let llm = FakeLlm::start().unwrap();
        let msgs = json!([{"role": "user", "content": "x"}]);
        let (s, h, b) = post(&llm, &req("e429", msgs.clone()));
        assert_eq!(s, 429);
        assert!(h.contains("retry-after-ms: 10"));
        assert!(b.contains("rate_limit_exceeded"));
        let (s, h, _) = post(&llm, &req("e401", msgs.clone()));
        assert_eq!(s, 401);
        assert!(!h.contains("retry-after-ms"));
        let (s, _, b) = post(&llm, &req("e529", msgs.clone()));
        assert_eq!(s, 529);
        assert!(b.contains("overloaded_error"));
        let (s, _, _) = post(&llm, &req("ectx1", msgs.clone()));
        assert_eq!(s, 400);
        let (s, _, b) = post(&llm, &req("ectx1", msgs.clone()));
        assert_eq!(s, 200);
        assert!(b.contains(OK_TEXT));
        let (_, _, b) = post(&llm, &req("midstream", msgs));
        assert!(b.contains("upstream model crashed"));
        assert!(!b.contains("[DONE]"));
    }

    #[test]
    fn title_requests_without_tools_get_a_title() {
        let llm = FakeLlm::start().unwrap();
        let (s, _, b) = post(
            &llm,
            &json!({"model": "e401", "stream": true, "messages": [{"role": "user", "content": "title?"}]}),
        );
        assert_eq!(s, 200);
        assert!(b.contains(TITLE_TEXT));
        assert!(!llm.requests()[0].has_tools());
    }

    #[test]
    fn models_lists_every_scenario() {
        let llm = FakeLlm::start().unwrap();
        let resp = http::exchange(llm.port(), "GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n");
        for m in SCENARIOS {
            assert!(resp.contains(&format!("\"id\":\"{m}\"")), "{m}");
        }
    }
}
