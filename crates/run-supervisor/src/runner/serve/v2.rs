//! The calls a served task makes on an opencode 2 server (the 2.0 preview: every route under
//! `/api`, docs/API-NOTES.md "opencode 2"), and its messages turned into the lines `opencode
//! run --format json` prints, so the parsing, classification, usage and audit are the `run`
//! runner's. Blocking (run on the blocking pool); every call bounded by the client's timeout and
//! failing with one line.
//!
//! What differs from the v1 server, measured on `@opencode-ai/cli-linux-x64@1.18.18`:
//! - a session is created with its location (`{"location":{"directory":D}}`), its agent and
//!   model; a `title` is dropped and there is no rename, so the task's title stays on the
//!   bridge's side (its record);
//! - a session takes no rules of its own: an agent's rules come from its configuration, read
//!   back from `GET /api/agent` before a read-only task starts;
//! - models load lazily per location: a prompt sent before they have is accepted and never
//!   answered, so the location's models are waited for first;
//! - the turn is followed by `GET /api/session/active` (a running session is listed) and read
//!   whole from `GET /api/session/{id}/message` (newest first) when it ends;
//! - `POST /api/session/{id}/interrupt` stops a turn.

use std::path::Path;
use std::time::{Duration, Instant};

use opencode_client::http::{HttpClient, encode_component};
use serde_json::{Value, json};

use crate::command::split_model;

/// `?location[directory]=D`, as the location-scoped routes take it.
fn location_query(dir: &Path) -> String {
    format!(
        "location%5Bdirectory%5D={}",
        encode_component(&dir.to_string_lossy())
    )
}

/// `provider/model#variant` as v2's model reference.
fn model_ref(model: &str) -> Result<Value, String> {
    let (model, variant) = split_model(model);
    let Some((provider, id)) = model.split_once('/') else {
        return Err(format!(
            "the model `{model}` names no provider: give it as provider/model"
        ));
    };
    let mut r = json!({"providerID": provider, "id": id});
    if let Some(v) = variant {
        r["variant"] = Value::from(v);
    }
    Ok(r)
}

/// Creates the task's session in `dir` for `agent` (and `model`, else the server's default);
/// its id.
pub(crate) fn create(
    http: &HttpClient,
    dir: &Path,
    agent: &str,
    model: Option<&str>,
) -> Result<String, String> {
    let mut body = json!({
        "agent": agent,
        "location": {"directory": dir.to_string_lossy()},
    });
    if let Some(m) = model.filter(|m| !m.trim().is_empty()) {
        body["model"] = model_ref(m)?;
    }
    let reply = http
        .post_json("/api/session", &body)
        .map_err(|e| format!("cannot create the session: {e}"))?;
    reply
        .body
        .pointer("/data/id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| "the server created a session but did not say its id".to_owned())
}

/// The agent's rules as the server resolved them for `dir` (`GET /api/agent`), in v1's form
/// (`{permission, pattern, action}`) so the policy's check reads them; `None` when the server
/// lists no such agent.
pub(crate) fn agent_rules(
    http: &HttpClient,
    dir: &Path,
    agent: &str,
) -> Result<Option<Vec<Value>>, String> {
    let reply = http
        .get_json(&format!("/api/agent?{}", location_query(dir)))
        .map_err(|e| format!("cannot list the agents: {e}"))?;
    let found = reply
        .body
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| a.get("id").and_then(Value::as_str) == Some(agent));
    Ok(found.map(|a| {
        a.get("permissions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|r| {
                json!({
                    "permission": r.get("action").cloned().unwrap_or(Value::Null),
                    "pattern": r.get("resource").cloned().unwrap_or(Value::Null),
                    "action": r.get("effect").cloned().unwrap_or(Value::Null),
                })
            })
            .collect()
    }))
}

/// Waits (until `until`) for the location's models to have loaded: the model's provider is
/// listed (any model, when the task names none). A prompt sent earlier is accepted and never
/// answered.
pub(crate) fn wait_for_models(
    http: &HttpClient,
    dir: &Path,
    model: Option<&str>,
    until: Instant,
) -> Result<(), String> {
    let provider = model
        .filter(|m| !m.trim().is_empty())
        .map(|m| split_model(m).0)
        .and_then(|m| {
            m.split_once('/')
                .map(|(p, id)| (p.to_owned(), id.to_owned()))
        });
    loop {
        let reply = http
            .get_json(&format!("/api/model?{}", location_query(dir)))
            .map_err(|e| format!("cannot list the models: {e}"))?;
        let models = reply.body.get("data").and_then(Value::as_array);
        let ready = match (&provider, models) {
            (_, None) => false,
            (None, Some(list)) => !list.is_empty(),
            (Some((p, id)), Some(list)) => list.iter().any(|m| {
                m.get("providerID").and_then(Value::as_str) == Some(p.as_str())
                    && m.get("id").and_then(Value::as_str) == Some(id.as_str())
            }),
        };
        if ready {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(match provider {
                Some((p, id)) => format!(
                    "the server lists no model {p}/{id} for {} (is it in opencode's configuration?)",
                    dir.display()
                ),
                None => format!("the server lists no model for {}", dir.display()),
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Points an existing session (a follow-up's) at the task's agent and model: a v2 session
/// keeps those it was created with, and a prompt names neither.
pub(crate) fn switch(
    http: &HttpClient,
    session: &str,
    agent: &str,
    model: Option<&str>,
) -> Result<(), String> {
    let base = format!("/api/session/{}", encode_component(session));
    http.post_json(&format!("{base}/agent"), &json!({ "agent": agent }))
        .map_err(|e| format!("cannot set the session's agent: {e}"))?;
    if let Some(m) = model.filter(|m| !m.trim().is_empty()) {
        http.post_json(&format!("{base}/model"), &json!({ "model": model_ref(m)? }))
            .map_err(|e| format!("cannot set the session's model: {e}"))?;
    }
    Ok(())
}

/// Sends the prompt; the reply is immediate, the turn runs on the server.
pub(crate) fn prompt(http: &HttpClient, session: &str, text: &str) -> Result<(), String> {
    let path = format!("/api/session/{}/prompt", encode_component(session));
    http.post_json(&path, &json!({"prompt": {"text": text}}))
        .map(|_| ())
        .map_err(|e| format!("cannot send the prompt: {e}"))
}

/// Whether the session's turn runs (`GET /api/session/active` lists it, not idle).
pub(crate) fn busy(http: &HttpClient, session: &str) -> Result<bool, String> {
    let reply = http
        .get_json("/api/session/active")
        .map_err(|e| e.to_string())?;
    Ok(reply
        .body
        .pointer(&format!("/data/{session}/type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "idle"))
}

/// Whether any session of the server has a turn going.
pub(crate) fn any_busy(http: &HttpClient) -> Result<bool, String> {
    let reply = http
        .get_json("/api/session/active")
        .map_err(|e| e.to_string())?;
    Ok(reply
        .body
        .get("data")
        .and_then(Value::as_object)
        .is_some_and(|m| {
            m.values().any(|s| {
                s.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t != "idle")
            })
        }))
}

/// The session's pending permission asks: `(id, action, resources)`.
pub(crate) fn asks(
    http: &HttpClient,
    session: &str,
) -> Result<Vec<(String, String, Vec<String>)>, String> {
    let path = format!("/api/session/{}/permission", encode_component(session));
    let reply = http.get_json(&path).map_err(|e| e.to_string())?;
    Ok(reply
        .body
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let id = r.get("id")?.as_str()?.to_owned();
            let action = r.get("action").and_then(Value::as_str).unwrap_or("?");
            let resources = r
                .get("resources")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            Some((id, action.to_owned(), resources))
        })
        .collect())
}

/// Answers a permission ask (`once` or `reject`).
pub(crate) fn reply(http: &HttpClient, session: &str, request: &str, answer: &str) {
    let path = format!(
        "/api/session/{}/permission/{}/reply",
        encode_component(session),
        encode_component(request)
    );
    let _ = http.post_json(&path, &json!({ "reply": answer }));
}

/// Stops the session's turn.
pub(crate) fn interrupt(http: &HttpClient, session: &str) -> Result<(), String> {
    let path = format!("/api/session/{}/interrupt", encode_component(session));
    http.post_json(&path, &json!({}))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The session's newest messages (v2 shapes, newest first).
pub(crate) fn messages(http: &HttpClient, session: &str) -> Result<Vec<Value>, String> {
    let path = format!(
        "/api/session/{}/message?limit=200",
        encode_component(session)
    );
    let reply = http
        .get_json(&path)
        .map_err(|e| format!("cannot read the session's messages: {e}"))?;
    Ok(reply
        .body
        .get("data")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Whether `messages` (newest first) hold a finished assistant message created at or after
/// `since_ms`.
pub(crate) fn turn_done_in(messages: &[Value], since_ms: u64) -> bool {
    messages.iter().any(|m| {
        m.get("type").and_then(Value::as_str) == Some("assistant")
            && m.pointer("/time/created")
                .and_then(Value::as_u64)
                .is_some_and(|c| c >= since_ms)
            && (m.pointer("/time/completed").is_some_and(|v| !v.is_null())
                || m.get("error").is_some_and(|e| !e.is_null()))
    })
}

/// The v2 assistant messages created at or after `since_ms` (`messages` newest first) in v1's
/// `{info, parts}` form, oldest first, for [`super::events::Follow::replay`]: text, tool calls
/// and one `step-finish` per message with its tokens and cost; an error as v1 names it (a
/// provider's HTTP status, which v2 gives only in the text, becomes `APIError`'s
/// `statusCode`; an interrupted turn `MessageAbortedError`).
///
/// With `live` (the turn still runs), a message not completed yet gives only its finished tool
/// calls: its text may still grow and its tokens are not final. Every part carries an `id`
/// (the message's and its place), so a [`super::events::Follow`] replaying the same turn again
/// emits each part once.
pub(crate) fn as_v1_messages(messages: &[Value], since_ms: u64, live: bool) -> Value {
    let mut out = Vec::new();
    for m in messages.iter().rev() {
        let created = m.pointer("/time/created").and_then(Value::as_u64);
        if m.get("type").and_then(Value::as_str) != Some("assistant")
            || created.is_none_or(|c| c < since_ms)
        {
            continue;
        }
        let mid = m.get("id").and_then(Value::as_str).unwrap_or("");
        let completed = m.pointer("/time/completed").cloned().unwrap_or(Value::Null);
        let partial = live && completed.is_null();
        let end = if completed.is_null() {
            json!(created)
        } else {
            completed.clone()
        };
        let mut parts = Vec::new();
        for (i, c) in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            match c.get("type").and_then(Value::as_str) {
                Some("text") if !partial => {
                    let text = c.get("text").and_then(Value::as_str).unwrap_or("");
                    if !text.is_empty() {
                        parts.push(json!({"id": format!("{mid}/{i}"), "type": "text",
                            "text": text, "time": {"start": created, "end": end}}));
                    }
                }
                Some("tool") => {
                    let state = c.get("state").unwrap_or(&Value::Null);
                    let finished = matches!(
                        state.get("status").and_then(Value::as_str),
                        Some("completed" | "error")
                    );
                    if partial && !finished {
                        continue;
                    }
                    let output: String = state
                        .get("content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|x| x.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join("\n");
                    let status = state.get("status").and_then(Value::as_str).unwrap_or("");
                    let status = match status {
                        "completed" | "error" => status,
                        // A call the turn's end left unfinished is reported as failed.
                        _ => "error",
                    };
                    let mut s = json!({
                        "status": status,
                        "input": state.get("input").cloned().unwrap_or(json!({})),
                        "output": output,
                        "time": {"start": created, "end": end},
                    });
                    if let Some(e) = state.get("error") {
                        s["error"] = json!(
                            e.get("message")
                                .and_then(Value::as_str)
                                .or_else(|| e.as_str())
                                .unwrap_or("failed")
                        );
                    }
                    parts.push(json!({
                        "id": format!("{mid}/{i}"),
                        "type": "tool",
                        "tool": c.get("name").cloned().unwrap_or(Value::Null),
                        "callID": c.get("id").cloned().unwrap_or(Value::Null),
                        "state": s,
                    }));
                }
                _ => {}
            }
        }
        if partial {
            out.push(json!({"info": {"id": mid, "role": "assistant",
                "time": {"created": created, "completed": null}}, "parts": parts}));
            continue;
        }
        parts.push(json!({
            "id": format!("{mid}/finish"),
            "type": "step-finish",
            "reason": m.get("finish").cloned().unwrap_or(Value::Null),
            "cost": m.get("cost").cloned().unwrap_or(json!(0)),
            "tokens": m.get("tokens").cloned().unwrap_or(json!({})),
        }));
        let mut info = json!({
            "id": mid,
            "role": "assistant",
            "time": {"created": created, "completed": completed},
            "agent": m.get("agent").cloned().unwrap_or(Value::Null),
        });
        if let Some(e) = m.get("error").filter(|e| !e.is_null()) {
            info["error"] = v1_error(e);
        }
        out.push(json!({"info": info, "parts": parts}));
    }
    Value::Array(out)
}

/// A v2 error (`{type, message}`) as v1 names it.
fn v1_error(e: &Value) -> Value {
    let message = e.get("message").and_then(Value::as_str).unwrap_or("");
    let ty = e.get("type").and_then(Value::as_str).unwrap_or("unknown");
    if ty == "aborted" || message == "Provider turn interrupted" {
        return json!({"name": "MessageAbortedError", "data": {"message": message}});
    }
    // "Provider request failed with HTTP 401: …"
    let status = message
        .split("HTTP ")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .or_else(|| {
            e.get("status")
                .and_then(Value::as_u64)
                .and_then(|s| u16::try_from(s).ok())
        });
    match status {
        Some(code) => json!({"name": "APIError", "data": {
            "message": message, "statusCode": code, "isRetryable": false}}),
        None => {
            let mut name: String = ty
                .split(['_', '-'])
                .map(|w| {
                    let mut c = w.chars();
                    c.next()
                        .map(|f| f.to_uppercase().chain(c).collect::<String>())
                        .unwrap_or_default()
                })
                .collect();
            name.push_str("Error");
            json!({"name": name, "data": {"message": message}})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn as the preview's `GET /api/session/{id}/message` gave it (newest first).
    fn turn() -> Vec<Value> {
        serde_json::from_str(r#"[
          {"id":"msg_b","time":{"created":2000,"completed":2100},"type":"assistant","agent":"build",
           "model":{"id":"echo","providerID":"fk"},"content":[{"type":"text","id":"text-0","text":"done"}],
           "finish":"stop","cost":0.5,"tokens":{"input":10,"output":3,"reasoning":0,"cache":{"read":0,"write":0}}},
          {"id":"msg_a","time":{"created":1500,"completed":1900},"type":"assistant","agent":"build",
           "content":[{"type":"tool","id":"call1","name":"write","state":{"status":"completed",
             "input":{"path":"hello.txt","content":"hi"},"content":[{"type":"text","text":"Wrote file"}]}}],
           "finish":"tool-calls","cost":0,"tokens":{"input":5,"output":1,"reasoning":0,"cache":{"read":0,"write":0}}},
          {"id":"msg_u","time":{"created":1400},"type":"user","text":"go"},
          {"id":"msg_old","time":{"created":100,"completed":200},"type":"assistant","content":[],"finish":"stop"}
        ]"#).unwrap()
    }

    #[test]
    fn a_turn_reads_as_run_lines_oldest_first() {
        let v1 = as_v1_messages(&turn(), 1000, false);
        let mut f = super::super::events::Follow::new("ses_1", false);
        let lines = f.replay(&v1, 1000);
        let types: Vec<String> = lines
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            types,
            ["tool_use", "step_finish", "text", "step_finish"],
            "{lines:?}"
        );
        let tool: Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(tool["part"]["tool"], "write");
        assert_eq!(tool["part"]["state"]["input"]["path"], "hello.txt");
        assert_eq!(tool["part"]["state"]["output"], "Wrote file");
        let step: Value = serde_json::from_str(&lines[3]).unwrap();
        assert_eq!(step["part"]["tokens"]["input"], 10);
        assert_eq!(f.errors(), 0);
        assert!(turn_done_in(&turn(), 1000));
        assert!(!turn_done_in(&turn(), 3000));
    }

    #[test]
    fn a_running_turn_replays_each_finished_part_once() {
        // msg_b still runs: its finished call shows, its unfinished one and its text do not.
        let mut running = turn();
        running[0] = serde_json::from_str(r#"{"id":"msg_b","time":{"created":2000},"type":"assistant",
            "content":[{"type":"tool","id":"call2","name":"read","state":{"status":"completed","input":{},"content":[]}},
                       {"type":"tool","id":"call3","name":"bash","state":{"status":"running","input":{}}},
                       {"type":"text","id":"t","text":"half"}]}"#).unwrap();
        let kinds = |lines: &[String]| -> Vec<String> {
            lines
                .iter()
                .map(|l| {
                    let v: Value = serde_json::from_str(l).unwrap();
                    format!(
                        "{}:{}",
                        v["type"].as_str().unwrap(),
                        v["part"]["tool"].as_str().unwrap_or("")
                    )
                })
                .collect()
        };
        let mut f = super::super::events::Follow::new("ses_1", false);
        let first = f.replay(&as_v1_messages(&running, 1000, true), 1000);
        assert_eq!(
            kinds(&first),
            ["tool_use:write", "step_finish:", "tool_use:read"]
        );
        // Polled again unchanged: nothing new.
        assert!(
            f.replay(&as_v1_messages(&running, 1000, true), 1000)
                .is_empty()
        );
        // The turn ended: only what was not emitted yet.
        let mut ended = running.clone();
        ended[0]["time"]["completed"] = json!(2300);
        ended[0]["content"][1]["state"]["status"] = json!("completed");
        ended[0]["content"][2]["text"] = json!("all done");
        ended[0]["finish"] = json!("stop");
        let last = f.replay(&as_v1_messages(&ended, 1000, false), 1000);
        assert_eq!(kinds(&last), ["tool_use:bash", "text:", "step_finish:"]);
        assert!(last[1].contains("all done"));
    }

    #[test]
    fn errors_read_as_v1_names_them() {
        let e = v1_error(&json!({"type":"unknown",
            "message":"Provider request failed with HTTP 401: {\"error\":\"bad key\"}"}));
        assert_eq!(e["name"], "APIError");
        assert_eq!(e["data"]["statusCode"], 401);
        let e = v1_error(&json!({"type":"unknown","message":"Provider turn interrupted"}));
        assert_eq!(e["name"], "MessageAbortedError");
        let e = v1_error(&json!({"type":"context_overflow","message":"too long"}));
        assert_eq!(e["name"], "ContextOverflowError");
        let v1 = as_v1_messages(
            &[
                json!({"type":"assistant","time":{"created":5,"completed":6},"content":[],
                "finish":"error","error":{"type":"unknown","message":"HTTP 4"}}),
            ],
            0,
            false,
        );
        assert_eq!(v1[0]["info"]["error"]["name"], "UnknownError");
    }

    #[test]
    fn models_name_their_provider() {
        assert_eq!(
            model_ref("fk/echo#high").unwrap(),
            json!({"providerID": "fk", "id": "echo", "variant": "high"})
        );
        assert!(model_ref("echo").unwrap_err().contains("provider/model"));
    }
}
