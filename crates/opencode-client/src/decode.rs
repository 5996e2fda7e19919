//! Turns opencode's message and part JSON into the values of [`crate::model`].
//!
//! The same shapes arrive from the SQLite store (`message.data`, `part.data`, where `id`,
//! `sessionID` and `messageID` live in columns instead) and from the v1 HTTP API (where those
//! keys are re-added). Both are accepted: unknown keys are ignored, missing keys become `None` /
//! zero, unknown part types become [`Part::Other`]. Nothing here panics on odd input.
//!
//! Rules worth knowing (also in `docs/API-NOTES.md`):
//! - a message whose `role` is `"user"` is a user message; every other role is treated as an
//!   assistant message (opencode 1.18 only writes `user` and `assistant`);
//! - the model of a user message is `model.providerID/model.modelID`, of an assistant message
//!   `providerID/modelID`;
//! - the agent is `agent`, falling back to `mode`;
//! - a message error is `{name, data:{message, statusCode?}}`; a bare string error is kept as an
//!   `UnknownError` with that text;
//! - reasoning text is dropped ([`Part::Reasoning`] carries no text).

use crate::model::{Message, MessageError, Part, Role, Tokens, ToolStatus};
use serde_json::Value;

/// Decodes a message JSON object and attaches the given parts (oldest first).
///
/// `id` is the message id (the store keeps it in a column; the API also has it in the JSON,
/// which is used when `id` is empty).
pub fn decode_message(id: &str, data: &Value, parts: Vec<Part>) -> Message {
    let role = match data.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        _ => Role::Assistant,
    };
    let id = if id.is_empty() {
        str_at(data, "id").unwrap_or_default()
    } else {
        id.to_string()
    };
    let model = match role {
        Role::User => data.get("model").and_then(model_of_user),
        Role::Assistant => join_model(str_at(data, "providerID"), str_at(data, "modelID")),
    };
    let time = data.get("time");
    Message {
        id,
        role,
        agent: str_at(data, "agent").or_else(|| str_at(data, "mode")),
        model,
        created_ms: time.and_then(|t| int_at(t, "created")).unwrap_or(0),
        completed_ms: time.and_then(|t| int_at(t, "completed")),
        finish: str_at(data, "finish"),
        error: data.get("error").and_then(decode_error),
        tokens: data.get("tokens").map(decode_tokens).unwrap_or_default(),
        cost: data.get("cost").and_then(Value::as_f64).unwrap_or(0.0),
        parts,
    }
}

/// Decodes a message from its JSON text; malformed JSON yields an assistant message with no
/// fields set rather than an error (a store row being written is never half-visible, so this
/// only guards against foreign data).
pub fn decode_message_str(id: &str, data: &str, parts: Vec<Part>) -> Message {
    let value = serde_json::from_str::<Value>(data).unwrap_or(Value::Null);
    decode_message(id, &value, parts)
}

/// Decodes a message error (`{name, data:{message, statusCode?}}`).
pub fn decode_error(v: &Value) -> Option<MessageError> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(MessageError {
            name: "UnknownError".into(),
            message: s.clone(),
            status_code: None,
        }),
        Value::Object(_) => {
            let name = str_at(v, "name").unwrap_or_else(|| "UnknownError".into());
            let data = v.get("data");
            let message = data
                .and_then(|d| str_at(d, "message"))
                .or_else(|| str_at(v, "message"))
                .unwrap_or_default();
            let status_code = data
                .and_then(|d| d.get("statusCode"))
                .and_then(Value::as_u64)
                .and_then(|n| u16::try_from(n).ok());
            Some(MessageError {
                name,
                message,
                status_code,
            })
        }
        other => Some(MessageError {
            name: "UnknownError".into(),
            message: other.to_string(),
            status_code: None,
        }),
    }
}

/// `Name: message` (or just `Name` when the message is empty), as shown in listings.
pub fn error_text(e: &MessageError) -> String {
    if e.message.is_empty() {
        e.name.clone()
    } else {
        format!("{}: {}", e.name, e.message)
    }
}

/// Decodes `{input, output, reasoning, cache:{read, write}}`. Numbers may be floats.
pub fn decode_tokens(v: &Value) -> Tokens {
    let cache = v.get("cache");
    Tokens {
        input: count_at(v, "input"),
        output: count_at(v, "output"),
        reasoning: count_at(v, "reasoning"),
        cache_read: cache.map(|c| count_at(c, "read")).unwrap_or(0),
        cache_write: cache.map(|c| count_at(c, "write")).unwrap_or(0),
    }
}

/// Decodes a part JSON object.
pub fn decode_part(data: &Value) -> Part {
    let kind = data.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => Part::Text {
            text: str_at(data, "text").unwrap_or_default(),
            synthetic: data
                .get("synthetic")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            time_ms: data.get("time").and_then(end_or_start),
        },
        "reasoning" => Part::Reasoning,
        "tool" => decode_tool(data),
        "step-start" => Part::StepStart,
        "step-finish" => Part::StepFinish {
            reason: str_at(data, "reason"),
        },
        "patch" => Part::Patch {
            files: data
                .get("files")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        },
        "" => Part::Other {
            part_type: "unknown".into(),
            summary: String::new(),
        },
        other => Part::Other {
            part_type: other.to_string(),
            summary: other_summary(other, data),
        },
    }
}

/// Decodes a part from its JSON text; malformed JSON yields `Part::Other { part_type: "unknown" }`.
pub fn decode_part_str(data: &str) -> Part {
    match serde_json::from_str::<Value>(data) {
        Ok(v) => decode_part(&v),
        Err(_) => Part::Other {
            part_type: "unknown".into(),
            summary: String::new(),
        },
    }
}

/// `provider/model` from a session row's `model` column (`{"id","providerID","variant"?}`), or
/// from a user message's `model` (`{"providerID","modelID"}`).
pub fn model_of_json(v: &Value) -> Option<String> {
    join_model(
        str_at(v, "providerID"),
        str_at(v, "id").or_else(|| str_at(v, "modelID")),
    )
}

fn model_of_user(v: &Value) -> Option<String> {
    model_of_json(v)
}

fn decode_tool(data: &Value) -> Part {
    let state = data.get("state").unwrap_or(&Value::Null);
    let status = match state.get("status").and_then(Value::as_str) {
        Some("completed") => ToolStatus::Completed,
        Some("error") => ToolStatus::Error,
        Some("running") => ToolStatus::Running,
        Some("pending") => ToolStatus::Pending,
        // Unknown status: an `error` key means it failed; otherwise it has no outcome yet.
        _ if state.get("error").is_some() => ToolStatus::Error,
        _ => ToolStatus::Pending,
    };
    let input = match state.get("input") {
        None | Some(Value::Null) => String::new(),
        Some(v) => v.to_string(),
    };
    let output = match status {
        ToolStatus::Completed => str_at(state, "output"),
        ToolStatus::Error => str_at(state, "error"),
        // A running bash tool streams its output into metadata.output.
        ToolStatus::Running => state.get("metadata").and_then(|m| str_at(m, "output")),
        ToolStatus::Pending => None,
    };
    Part::Tool {
        tool: str_at(data, "tool").unwrap_or_else(|| "unknown".into()),
        status,
        input,
        output,
        time_ms: state.get("time").and_then(end_or_start),
    }
}

fn other_summary(kind: &str, data: &Value) -> String {
    match kind {
        "agent" => str_at(data, "name")
            .map(|n| format!("@{n}"))
            .unwrap_or_default(),
        "subtask" => {
            let agent = str_at(data, "agent").unwrap_or_default();
            let description = str_at(data, "description").unwrap_or_default();
            format!("{agent}: {description}")
        }
        "file" => str_at(data, "filename")
            .or_else(|| str_at(data, "url"))
            .unwrap_or_default(),
        "compaction" => {
            let auto = data.get("auto").and_then(Value::as_bool).unwrap_or(false);
            let overflow = data
                .get("overflow")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            match (auto, overflow) {
                (true, true) => "automatic, after a context overflow".into(),
                (true, false) => "automatic".into(),
                _ => "requested".into(),
            }
        }
        "retry" => {
            let attempt = data.get("attempt").and_then(Value::as_u64).unwrap_or(0);
            let err = data
                .get("error")
                .and_then(decode_error)
                .map(|e| error_text(&e))
                .unwrap_or_default();
            format!("attempt {attempt}: {err}")
        }
        "snapshot" => str_at(data, "snapshot").unwrap_or_default(),
        _ => String::new(),
    }
}

fn join_model(provider: Option<String>, model: Option<String>) -> Option<String> {
    match (provider, model) {
        (Some(p), Some(m)) => Some(format!("{p}/{m}")),
        (None, Some(m)) => Some(m),
        _ => None,
    }
}

fn str_at(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

fn int_at(v: &Value, key: &str) -> Option<i64> {
    let n = v.get(key)?;
    n.as_i64().or_else(|| n.as_f64().map(|f| f as i64))
}

fn count_at(v: &Value, key: &str) -> u64 {
    match v.get(key) {
        Some(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .unwrap_or(0),
        None => 0,
    }
}

fn end_or_start(time: &Value) -> Option<i64> {
    int_at(time, "end").or_else(|| int_at(time, "start"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn assistant_message_with_error_and_tokens() {
        let data = json!({"parentID":"msg_1","role":"assistant","mode":"build","agent":"build","cost":0.5,
            "tokens":{"total":28,"input":20,"output":8,"reasoning":1,"cache":{"write":3,"read":2}},
            "modelID":"e401","providerID":"fk","time":{"created":10,"completed":20},
            "error":{"name":"APIError","data":{"message":"Incorrect API key provided: sk-xxx.","statusCode":401,"isRetryable":false}}});
        let m = decode_message("msg_2", &data, vec![]);
        assert_eq!(m.id, "msg_2");
        assert_eq!(m.role, Role::Assistant);
        assert_eq!(m.model.as_deref(), Some("fk/e401"));
        assert_eq!(m.agent.as_deref(), Some("build"));
        assert_eq!((m.created_ms, m.completed_ms), (10, Some(20)));
        assert_eq!(
            m.tokens,
            Tokens {
                input: 20,
                output: 8,
                reasoning: 1,
                cache_read: 2,
                cache_write: 3
            }
        );
        assert_eq!(m.cost, 0.5);
        let e = m.error.unwrap();
        assert_eq!(e.status_code, Some(401));
        assert_eq!(
            error_text(&e),
            "APIError: Incorrect API key provided: sk-xxx."
        );
    }

    #[test]
    fn user_message_and_api_shape_with_ids() {
        let data = json!({"id":"msg_9","sessionID":"ses_1","role":"user","time":{"created":5},
            "agent":"build","model":{"providerID":"fk","modelID":"ok"},"summary":{"diffs":[]}});
        let m = decode_message("", &data, vec![]);
        assert_eq!(m.id, "msg_9");
        assert_eq!(m.role, Role::User);
        assert_eq!(m.model.as_deref(), Some("fk/ok"));
        assert_eq!(m.completed_ms, None);
        assert_eq!(m.error, None);
    }

    #[test]
    fn garbage_never_panics() {
        for v in [
            json!(null),
            json!(42),
            json!("x"),
            json!([1, 2]),
            json!({"role": 7, "time": "no", "tokens": {"input": -3.5, "cache": 1}, "error": 5}),
        ] {
            let m = decode_message("m", &v, vec![decode_part(&v)]);
            assert_eq!(m.id, "m");
        }
        assert!(matches!(decode_part_str("{not json"), Part::Other { .. }));
        let m = decode_message_str("m", "{", vec![]);
        assert_eq!(m.role, Role::Assistant);
    }

    #[test]
    fn parts_by_type() {
        assert_eq!(
            decode_part(
                &json!({"type":"text","text":"hi","synthetic":true,"time":{"start":1,"end":2}})
            ),
            Part::Text {
                text: "hi".into(),
                synthetic: true,
                time_ms: Some(2)
            }
        );
        assert_eq!(
            decode_part(&json!({"type":"reasoning","text":"secret"})),
            Part::Reasoning
        );
        assert_eq!(
            decode_part(&json!({"type":"step-finish","reason":"tool-calls"})),
            Part::StepFinish {
                reason: Some("tool-calls".into())
            }
        );
        assert_eq!(
            decode_part(&json!({"type":"patch","hash":"h","files":["a","b"]})),
            Part::Patch {
                files: vec!["a".into(), "b".into()]
            }
        );
        let tool = decode_part(
            &json!({"type":"tool","tool":"read","callID":"c","state":{"status":"error",
            "input":{"filePath":"/nonexistent/file.txt"},"error":"The user rejected permission to use this specific tool call.",
            "time":{"start":1,"end":2}}}),
        );
        assert_eq!(
            tool,
            Part::Tool {
                tool: "read".into(),
                status: ToolStatus::Error,
                input: r#"{"filePath":"/nonexistent/file.txt"}"#.into(),
                output: Some("The user rejected permission to use this specific tool call.".into()),
                time_ms: Some(2)
            }
        );
        let running = decode_part(
            &json!({"type":"tool","tool":"bash","state":{"status":"running","input":{},"time":{"start":7},"metadata":{"output":"so far"}}}),
        );
        assert!(
            matches!(running, Part::Tool { status: ToolStatus::Running, output: Some(ref o), time_ms: Some(7), .. } if o == "so far")
        );
        assert_eq!(
            decode_part(&json!({"type":"subtask","agent":"general","description":"Sub"})),
            Part::Other {
                part_type: "subtask".into(),
                summary: "general: Sub".into()
            }
        );
        assert_eq!(
            decode_part(&json!({"type":"hologram"})),
            Part::Other {
                part_type: "hologram".into(),
                summary: String::new()
            }
        );
    }

    #[test]
    fn session_model_column() {
        assert_eq!(
            model_of_json(&json!({"id":"toolwrite","providerID":"fk","variant":"default"}))
                .as_deref(),
            Some("fk/toolwrite")
        );
        assert_eq!(model_of_json(&json!({})), None);
    }
}
