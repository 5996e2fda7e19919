//! The calls a served task makes: create or continue its session, set its permission rules,
//! send the prompt, answer permission asks, abort. Blocking (run on the blocking pool); every
//! call bounded by the client's timeout and failing with one line.

use std::path::Path;

use opencode_client::http::{HttpClient, encode_component};
use serde_json::{Value, json};

use crate::command::split_model;

/// The rules `opencode run` gives every session it creates (1.18.33): no questions, no plan
/// mode switches (nobody is there to answer).
fn run_session_rules() -> Vec<Value> {
    ["question", "plan_enter", "plan_exit"]
        .iter()
        .map(|p| json!({"permission": p, "pattern": "*", "action": "deny"}))
        .collect()
}

/// A config-form permission object (`{"*": "deny", "read": {"*": "allow", "*.env": "deny"}}`)
/// as a session's rule list, in the order opencode evaluates it (the last matching rule
/// wins): `*` first, then each permission by name, patterns in key order.
pub(crate) fn rules_of(config: &Value) -> Vec<Value> {
    let mut rules = Vec::new();
    let Some(map) = config.as_object() else {
        return rules;
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by_key(|k| (k.as_str() != "*", k.as_str()));
    for k in keys {
        match &map[k] {
            Value::String(action) => {
                rules.push(json!({"permission": k, "pattern": "*", "action": action}))
            }
            Value::Object(patterns) => {
                let mut pats: Vec<&String> = patterns.keys().collect();
                pats.sort_by_key(|p| (p.as_str() != "*", p.len(), p.as_str()));
                for p in pats {
                    if let Some(action) = patterns[p].as_str() {
                        rules.push(json!({"permission": k, "pattern": p, "action": action}));
                    }
                }
            }
            _ => {}
        }
    }
    rules
}

/// The rules appended to a read-only agent's session: the policy's default-deny.
pub(crate) fn read_only_rules() -> Vec<Value> {
    rules_of(&bridge_policy::roster::read_only_permissions())
}

fn dir_query(dir: &Path) -> String {
    format!("directory={}", encode_component(&dir.to_string_lossy()))
}

/// Creates the task's session in `dir` with its title and `run`'s rules; its id.
pub(crate) fn create(http: &HttpClient, dir: &Path, title: &str) -> Result<String, String> {
    let mut body = json!({"permission": run_session_rules()});
    if !title.is_empty() {
        body["title"] = Value::from(title);
    }
    let reply = http
        .post_json(&format!("/session?{}", dir_query(dir)), &body)
        .map_err(|e| format!("cannot create the session: {e}"))?;
    reply
        .body
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| "the server created a session but did not say its id".to_owned())
}

/// Appends `rules` to the session's permission rules.
pub(crate) fn append_rules(
    http: &HttpClient,
    dir: &Path,
    session: &str,
    rules: Vec<Value>,
) -> Result<(), String> {
    let path = format!("/session/{}?{}", encode_component(session), dir_query(dir));
    http.patch_json(&path, &json!({ "permission": rules }))
        .map(|_| ())
        .map_err(|e| format!("cannot set the session's permission rules: {e}"))
}

/// The session's permission rules as the server holds them.
pub(crate) fn rules(http: &HttpClient, dir: &Path, session: &str) -> Result<Vec<Value>, String> {
    let path = format!("/session/{}?{}", encode_component(session), dir_query(dir));
    let reply = http
        .get_json(&path)
        .map_err(|e| format!("cannot read the session: {e}"))?;
    Ok(reply
        .body
        .get("permission")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default())
}

/// Sends the prompt (`prompt_async`: the reply is immediate, the work shows on the event
/// stream) with the agent and model.
pub(crate) fn prompt(
    http: &HttpClient,
    dir: &Path,
    session: &str,
    agent: &str,
    model: Option<&str>,
    text: &str,
) -> Result<(), String> {
    let mut body = json!({
        "agent": agent,
        "parts": [{"type": "text", "text": text}],
    });
    if let Some(m) = model.filter(|m| !m.trim().is_empty()) {
        let (model, variant) = split_model(m);
        let Some((provider, id)) = model.split_once('/') else {
            return Err(format!(
                "the model `{model}` names no provider: give it as provider/model"
            ));
        };
        body["model"] = json!({"providerID": provider, "modelID": id});
        if let Some(v) = variant {
            body["variant"] = Value::from(v);
        }
    }
    let path = format!(
        "/session/{}/prompt_async?{}",
        encode_component(session),
        dir_query(dir)
    );
    http.post_json(&path, &body)
        .map(|_| ())
        .map_err(|e| format!("cannot send the prompt: {e}"))
}

/// The session's messages (`[{info, parts}]`, oldest first).
pub(crate) fn messages(http: &HttpClient, dir: &Path, session: &str) -> Result<Value, String> {
    let path = format!(
        "/session/{}/message?{}",
        encode_component(session),
        dir_query(dir)
    );
    http.get_json(&path)
        .map(|r| r.body)
        .map_err(|e| format!("cannot read the session's messages: {e}"))
}

/// Answers a permission request.
pub(crate) fn reply(http: &HttpClient, dir: &Path, request: &str, answer: &str) {
    let path = format!(
        "/permission/{}/reply?{}",
        encode_component(request),
        dir_query(dir)
    );
    let _ = http.post_json(&path, &json!({ "reply": answer }));
}

/// Stops the session's turn.
pub(crate) fn abort(http: &HttpClient, dir: &Path, session: &str) -> Result<(), String> {
    let path = format!(
        "/session/{}/abort?{}",
        encode_component(session),
        dir_query(dir)
    );
    http.post_json(&path, &json!({}))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Whether the session is busy (or retrying) on the server.
pub(crate) fn busy(http: &HttpClient, dir: &Path, session: &str) -> Result<bool, String> {
    let reply = http
        .get_json(&format!("/session/status?{}", dir_query(dir)))
        .map_err(|e| e.to_string())?;
    Ok(reply
        .body
        .get(session)
        .and_then(|s| s.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "idle"))
}

/// Whether any session the server runs in `dir` has a turn going (busy or waiting to retry):
/// `/session/status` lists only those.
pub(crate) fn any_busy(http: &HttpClient, dir: &Path) -> Result<bool, String> {
    let reply = http
        .get_json(&format!("/session/status?{}", dir_query(dir)))
        .map_err(|e| e.to_string())?;
    Ok(reply.body.as_object().is_some_and(|m| {
        m.values().any(|s| {
            s.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t != "idle")
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_rules_deny_everything_first_then_allow_the_read_tools() {
        let rules = read_only_rules();
        assert_eq!(
            rules[0],
            json!({"permission": "*", "pattern": "*", "action": "deny"})
        );
        let action = |perm: &str, pat: &str| {
            rules
                .iter()
                .rev()
                .find(|r| r["permission"] == perm && (r["pattern"] == pat || r["pattern"] == "*"))
                .map(|r| r["action"].as_str().unwrap().to_owned())
        };
        assert_eq!(action("read", "*").as_deref(), Some("allow"));
        assert_eq!(action("read", "*.env").as_deref(), Some("deny"));
        assert_eq!(action("bash", "*").as_deref(), Some("deny"));
        let last_read = rules
            .iter()
            .rposition(|r| r["permission"] == "read" && r["pattern"] == "*.env.example")
            .unwrap();
        let env_deny = rules
            .iter()
            .position(|r| r["permission"] == "read" && r["pattern"] == "*.env.*")
            .unwrap();
        assert!(last_read > env_deny, "{rules:?}");
    }
}
