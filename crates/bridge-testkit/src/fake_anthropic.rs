//! A fake Anthropic Messages API that drives a real Claude Code through a scripted sequence of
//! tool calls and records everything Claude Code sends back.
//!
//! In-process: a `std::net::TcpListener` on `127.0.0.1:0`, one thread per connection, a minimal
//! hand-written HTTP/1.1 (every response closes its connection). It answers:
//!
//! - `POST /v1/messages` (with or without `?beta=true`): a *main-loop* request (one that offers
//!   at least one `mcp__` tool) is answered by the next step of the script, streamed as Anthropic
//!   server-sent events (`message_start`, `content_block_start`, `content_block_delta`,
//!   `content_block_stop`, `message_delta`, `message_stop`) or as one JSON message when the
//!   request has no `"stream": true`. Any other request (title or topic generation, ...) gets a
//!   short text and does not advance the script.
//! - `POST /v1/messages/count_tokens`: `{"input_tokens": 100}`.
//! - anything else: `200 {}`, and it is remembered in [`FakeAnthropic::unknown`].
//!
//! A script is a list of [`Step`]s. Each main-loop request first records the `tool_result`
//! blocks of its last user message ([`FakeAnthropic::tool_results`]), then asks the current step
//! what to answer; a step sees every tool result so far, so it can use an id returned by an
//! earlier call, and it can repeat itself (polling) until a result says what it waits for.
//! When the script is exhausted the answer is the text `script finished`.

use crate::anthropic_api::{self, respond, respond_json};
use crate::http::{self, Server};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, BufReader};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// What the fake model does on one turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Call a tool (full name as Claude Code offers it, e.g. `mcp__opencode-bridge__opencode_list`)
    /// and move to the next step.
    Call { name: String, input: Value },
    /// Call a tool and stay on this step (polling): the step is asked again next turn.
    Again { name: String, input: Value },
    /// Answer with text and end the turn; moves to the next step.
    Text(String),
    /// Skip to the next step at once.
    Next,
}

/// What a step can look at.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Text of every tool result received so far, oldest first.
    pub results: Vec<ToolResult>,
}

impl Seen {
    /// The text of the newest tool result, `""` before the first.
    pub fn last(&self) -> &str {
        self.results.last().map(|r| r.text.as_str()).unwrap_or("")
    }
}

/// One scripted turn: a function of what was seen so far.
pub type Step = Box<dyn Fn(&Seen) -> Action + Send + Sync>;

/// A step that calls `tool` (short name, prefixed with `mcp__<server>__` by [`FakeAnthropic`];
/// `=Name` calls a Claude Code built-in such as `=TaskStop`)
/// with fixed input.
pub fn call(tool: &str, input: Value) -> Step {
    let tool = tool.to_string();
    Box::new(move |_| Action::Call {
        name: tool.clone(),
        input: input.clone(),
    })
}

/// A step whose input is computed from the results so far.
pub fn call_with(tool: &str, input: impl Fn(&Seen) -> Value + Send + Sync + 'static) -> Step {
    let tool = tool.to_string();
    Box::new(move |seen| Action::Call {
        name: tool.clone(),
        input: input(seen),
    })
}

/// A step that calls `tool` again and again (once per turn, pausing `pause` before answering)
/// until the newest result of this step satisfies `done`, at most `max` times.
pub fn poll(
    tool: &str,
    input: impl Fn(&Seen) -> Value + Send + Sync + 'static,
    done: impl Fn(&str) -> bool + Send + Sync + 'static,
    pause: Duration,
    max: usize,
) -> Step {
    let tool = tool.to_string();
    let calls = Mutex::new(0usize);
    Box::new(move |seen| {
        let mut n = calls.lock().unwrap();
        if *n > 0 && (done(seen.last()) || *n >= max) {
            return Action::Next;
        }
        if *n > 0 {
            thread::sleep(pause);
        }
        *n += 1;
        Action::Again {
            name: tool.clone(),
            input: input(seen),
        }
    })
}

/// A step that polls the bridge's `opencode_status` of task `id` once a second (at most 150
/// times) until the task has ended (succeeded, failed or timed out).
pub fn status_until_finished(id: &str) -> Step {
    let id = id.to_string();
    poll(
        "opencode_status",
        move |_| json!({ "id": id }),
        |r| r.contains("succeeded") || r.contains("failed") || r.contains("timed_out"),
        Duration::from_secs(1),
        150,
    )
}

/// A final text answer.
pub fn text(text: &str) -> Step {
    let text = text.to_string();
    Box::new(move |_| Action::Text(text.clone()))
}

/// A `tool_result` block Claude Code sent back.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub tool_use_id: String,
    /// The tool the fake called with that id (short name), when known.
    pub tool: Option<String>,
    pub text: String,
    pub is_error: bool,
}

#[derive(Default)]
struct State {
    cursor: usize,
    next_id: u64,
    /// tool_use id → short tool name.
    issued: HashMap<String, String>,
    seen: Seen,
    seen_ids: Vec<String>,
    bodies: Vec<Value>,
    unknown: Vec<String>,
}

struct Shared {
    script: Vec<Step>,
    prefix: String,
    state: Mutex<State>,
}

/// The running fake endpoint. Dropping it stops the listener.
pub struct FakeAnthropic {
    server: Server,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for FakeAnthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeAnthropic")
            .field("port", &self.server.port())
            .finish_non_exhaustive()
    }
}

impl FakeAnthropic {
    /// Starts the endpoint on a free loopback port. `server` is the MCP server name as
    /// registered in Claude Code; step tool names get the `mcp__<server>__` prefix.
    pub fn start(server: &str, script: Vec<Step>) -> io::Result<FakeAnthropic> {
        let shared = Arc::new(Shared {
            script,
            prefix: format!("mcp__{server}__"),
            state: Mutex::new(State::default()),
        });
        let s = shared.clone();
        let server = Server::start("fake-anthropic", move |stream, _| {
            if let Err(e) = handle(stream, &s) {
                eprintln!("fake-anthropic: connection error: {e}");
            }
        })?;
        Ok(FakeAnthropic { server, shared })
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// Every `/v1/messages` request body received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.state.lock().unwrap().bodies.clone()
    }

    /// Every tool result received, in order.
    pub fn tool_results(&self) -> Vec<ToolResult> {
        self.shared.state.lock().unwrap().seen.results.clone()
    }

    /// The results received for one tool (short name).
    pub fn results_of(&self, tool: &str) -> Vec<ToolResult> {
        self.tool_results()
            .into_iter()
            .filter(|r| r.tool.as_deref() == Some(tool))
            .collect()
    }

    /// How many script steps have been completed.
    pub fn steps_done(&self) -> usize {
        self.shared.state.lock().unwrap().cursor
    }

    /// Requests the fake does not know (`METHOD path`).
    pub fn unknown(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().unknown.clone()
    }

    /// The environment that points Claude Code at this endpoint and keeps it offline otherwise.
    pub fn claude_env(&self) -> Vec<(String, String)> {
        let mut env = anthropic_api::offline_claude_env(self.base_url());
        env.push(("ENABLE_TOOL_SEARCH".into(), "false".into()));
        env
    }
}

fn handle(stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    let req = http::read_request(&mut BufReader::new(&stream))?.unwrap_or_default();
    match (req.method.as_str(), req.route()) {
        ("POST", "/v1/messages/count_tokens") => respond_json(&stream, br#"{"input_tokens":100}"#),
        ("POST", "/v1/messages") => {
            let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
            let stream_mode = body.get("stream").and_then(Value::as_bool) == Some(true);
            let model = body
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("claude-fake")
                .to_string();
            let action = next_action(shared, &body);
            let (content, stop) = match action {
                Action::Call { name, input } | Action::Again { name, input } => {
                    let id = {
                        let mut st = shared.state.lock().unwrap();
                        st.next_id += 1;
                        let id = format!("toolu_fake{:04}", st.next_id);
                        st.issued.insert(id.clone(), name.clone());
                        id
                    };
                    (
                        json!({"type": "tool_use", "id": id, "name": wire_name(&shared.prefix, &name), "input": input}),
                        "tool_use",
                    )
                }
                Action::Text(t) => (json!({"type": "text", "text": t}), "end_turn"),
                Action::Next => unreachable!("resolved in next_action"),
            };
            if stream_mode {
                let (pre, post) = anthropic_api::sse(&model, &content, stop);
                respond(
                    &stream,
                    200,
                    "OK",
                    "text/event-stream",
                    &[],
                    (pre + &post).as_bytes(),
                )
            } else {
                let msg = anthropic_api::message(&model, &content, stop);
                respond_json(&stream, msg.to_string().as_bytes())
            }
        }
        (method, _) => {
            shared
                .state
                .lock()
                .unwrap()
                .unknown
                .push(format!("{method} {}", req.path));
            respond_json(&stream, if method == "HEAD" { b"" } else { b"{}" })
        }
    }
}

/// Whether a request offers one of our MCP tools (the main loop) or is a side request.
/// The tool name as sent: `=Name` is a Claude Code built-in (`=TaskStop`), sent as is; any other
/// name is one of the server's tools and gets the `mcp__<server>__` prefix.
fn wire_name(prefix: &str, name: &str) -> String {
    match name.strip_prefix('=') {
        Some(builtin) => builtin.to_owned(),
        None => format!("{prefix}{name}"),
    }
}

fn is_main_loop(body: &Value, prefix: &str) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .is_some_and(|tools| {
            tools.iter().any(|t| {
                t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| n.starts_with(prefix))
            })
        })
}

fn block_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn next_action(shared: &Shared, body: &Value) -> Action {
    let mut st = shared.state.lock().unwrap();
    st.bodies.push(body.clone());
    if !is_main_loop(body, &shared.prefix) {
        return Action::Text("Fake side answer".into());
    }
    // Record the tool results of every user message not seen yet.
    if let Some(messages) = body.get("messages").and_then(Value::as_array) {
        for m in messages
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        {
            let Some(blocks) = m.get("content").and_then(Value::as_array) else {
                continue;
            };
            for b in blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            {
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                if st.seen_ids.contains(&id) {
                    continue;
                }
                st.seen_ids.push(id.clone());
                let result = ToolResult {
                    tool: st.issued.get(&id).cloned(),
                    tool_use_id: id,
                    text: block_text(b.get("content").unwrap_or(&Value::Null)),
                    is_error: b.get("is_error").and_then(Value::as_bool) == Some(true),
                };
                st.seen.results.push(result);
            }
        }
    }
    loop {
        let Some(step) = shared.script.get(st.cursor) else {
            return Action::Text("script finished".into());
        };
        let seen = st.seen.clone();
        // Steps may sleep (polling); do not hold the lock meanwhile.
        drop(st);
        let action = step(&seen);
        st = shared.state.lock().unwrap();
        match action {
            Action::Next => st.cursor += 1,
            Action::Again { .. } => return action,
            other => {
                st.cursor += 1;
                return other;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(port: u16, body: &Value) -> String {
        http::post_json(port, "/v1/messages?beta=true", body)
    }

    #[test]
    fn scripted_calls_then_text_and_results_are_recorded() {
        let fake = FakeAnthropic::start(
            "srv",
            vec![
                call("t1", json!({"a": 1})),
                call_with("t2", |seen| json!({"prev": seen.last()})),
                text("all done"),
            ],
        )
        .unwrap();
        let tools = json!([{"name": "mcp__srv__t1"}]);
        let first = post(
            fake.server.port(),
            &json!({"stream": true, "tools": tools, "messages": []}),
        );
        assert!(first.contains("event: message_start"));
        assert!(first.contains(r#""name":"mcp__srv__t1""#));
        assert!(first.contains(r#"\"a\":1"#));
        assert!(first.contains(r#""stop_reason":"tool_use""#));
        let msgs = json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_fake0001", "content": [{"type": "text", "text": "R1"}]}]}]);
        let second = post(
            fake.server.port(),
            &json!({"stream": true, "tools": tools, "messages": msgs}),
        );
        assert!(second.contains(r#"\"prev\":\"R1\""#), "{second}");
        let side = post(fake.server.port(), &json!({"messages": []}));
        assert!(side.contains("Fake side answer"));
        let third = post(
            fake.server.port(),
            &json!({"stream": true, "tools": tools, "messages": msgs}),
        );
        assert!(third.contains("all done") && third.contains("end_turn"));
        let results = fake.tool_results();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].tool.as_deref(), Some("t1"));
        assert_eq!(results[0].text, "R1");
        assert_eq!(fake.steps_done(), 3);
    }

    #[test]
    fn poll_repeats_until_done() {
        let fake = FakeAnthropic::start(
            "s",
            vec![
                poll(
                    "st",
                    |_| json!({}),
                    |r| r.contains("finished"),
                    Duration::ZERO,
                    5,
                ),
                text("end"),
            ],
        )
        .unwrap();
        let tools = json!([{"name": "mcp__s__st"}]);
        let mut msgs = vec![];
        for (i, r) in ["running", "finished"].iter().enumerate() {
            let out = post(
                fake.server.port(),
                &json!({"stream": true, "tools": tools, "messages": msgs}),
            );
            assert!(out.contains("mcp__s__st"), "turn {i}: {out}");
            msgs.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_fake{:04}", i + 1), "content": r}]}));
        }
        let out = post(
            fake.server.port(),
            &json!({"stream": true, "tools": tools, "messages": msgs}),
        );
        assert!(out.contains("end"));
    }
}
