//! What a task's session on `opencode serve` says on the server's event stream, turned into
//! what the supervisor already reads: the lines `opencode run --format json` prints for the same
//! session (the same filter as opencode's own `run` command, which follows the same stream of an
//! in-process server), the permission replies `run` would give, and the end of the turn.

use std::collections::HashSet;

use serde_json::{Value, json};

/// What to do about one event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// A line of `opencode run --format json` output, without its newline.
    Line(String),
    /// Answer a permission request (`once` or `reject`), and the line `run` prints on stderr
    /// when it rejects one.
    Permission {
        id: String,
        reply: &'static str,
        stderr: Option<String>,
    },
    /// The turn ended (the session went idle after being busy).
    Idle,
    /// opencode is waiting to retry a request the provider refused (`session.status` of type
    /// `retry`), or, `None`, it is busy again after such a wait.
    Retry(Option<bridge_ledger::quota::ProviderWait>),
}

/// Follows one session (and its child sessions) on an event stream.
#[derive(Debug)]
pub(crate) struct Follow {
    session: String,
    /// The session and every child session opened under it (the `task` tool's subagents).
    family: HashSet<String>,
    /// The turn began: the session was seen busy (or retrying).
    busy: bool,
    /// The turn ended: the session went idle after being seen busy.
    ended: bool,
    errors: usize,
    /// What [`Follow::replay`] emitted already (part ids, and `<message id>/error`): a turn
    /// replayed again while it runs gives each part once.
    replayed: HashSet<String>,
    /// Permission asks are approved once (`run --auto`) rather than rejected.
    approve: bool,
}

impl Follow {
    /// Follows `session`; `approve` answers permission asks `once` (an editing agent with
    /// `--auto`), else they are rejected (read-only agents, or `auto_approve` off).
    pub(crate) fn new(session: &str, approve: bool) -> Follow {
        Follow {
            session: session.to_owned(),
            family: HashSet::from([session.to_owned()]),
            busy: false,
            ended: false,
            errors: 0,
            replayed: HashSet::new(),
            approve,
        }
    }

    /// Follows a session whose prompt was sent by an earlier bridge: `busy` is what the server
    /// says of it now.
    pub(crate) fn resumed(session: &str, approve: bool, busy: bool) -> Follow {
        Follow {
            busy,
            ..Follow::new(session, approve)
        }
    }

    /// The `run` lines of what the session's assistant messages created at or after
    /// `since_ms` hold (`GET /session/{id}/message`), for a turn whose events went by
    /// unseen; their errors count as the stream's would. A part (or a message's error) with an
    /// id that an earlier replay emitted is not emitted again.
    pub(crate) fn replay(&mut self, messages: &Value, since_ms: u64) -> Vec<String> {
        let mut lines = Vec::new();
        for m in messages.as_array().into_iter().flatten() {
            let info = m.get("info").unwrap_or(&Value::Null);
            let created = info
                .pointer("/time/created")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            if info.get("role").and_then(Value::as_str) != Some("assistant") || created < since_ms {
                continue;
            }
            for part in m
                .get("parts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(ty) = run_type(part)
                    && self.first_replay(part.get("id").and_then(Value::as_str))
                {
                    lines.push(self.line(ty, "part", part));
                }
            }
            if let Some(error) = info.get("error").filter(|e| !e.is_null()) {
                let key = info
                    .get("id")
                    .and_then(Value::as_str)
                    .map(|m| format!("{m}/error"));
                if self.first_replay(key.as_deref()) {
                    self.errors += 1;
                    lines.push(self.line("error", "error", error));
                }
            }
        }
        lines
    }

    /// Whether a replay emits what `id` names: always without an id, else the first time.
    fn first_replay(&mut self, id: Option<&str>) -> bool {
        id.is_none_or(|id| self.replayed.insert(id.to_owned()))
    }

    /// Whether the turn has begun on the server: its loop is running, so an abort reaches it.
    /// Between `prompt_async`'s reply and this, an abort finds nothing to stop and is lost.
    pub(crate) fn started(&self) -> bool {
        self.busy
    }

    /// Whether the turn has ended (idle after busy).
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// `session.error` events seen for the session (`run` exits 1 after any).
    pub(crate) fn errors(&self) -> usize {
        self.errors
    }

    /// Reads one event frame (`{type, properties}`, or `/global/event`'s `{payload}`).
    pub(crate) fn on_event(&mut self, frame: &Value) -> Option<Action> {
        let ev = frame.get("payload").unwrap_or(frame);
        let kind = ev.get("type")?.as_str()?;
        let props = ev.get("properties")?;
        let sid = |v: &Value| {
            v.get("sessionID")
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        match kind {
            "message.part.updated" => {
                let part = props.get("part")?;
                if sid(part)?.as_str() != self.session {
                    return None;
                }
                let ty = run_type(part)?;
                Some(Action::Line(self.line(ty, "part", part)))
            }
            "session.error" => {
                // `run` prints errors of its own session (an error naming no session too).
                if sid(props).is_some_and(|s| s != self.session) {
                    return None;
                }
                self.errors += 1;
                let error = props.get("error").cloned().unwrap_or(Value::Null);
                Some(Action::Line(self.line("error", "error", &error)))
            }
            "session.status" => {
                if sid(props)?.as_str() != self.session {
                    return None;
                }
                match props.pointer("/status/type").and_then(Value::as_str)? {
                    "busy" => {
                        self.busy = true;
                        Some(Action::Retry(None))
                    }
                    "retry" => {
                        self.busy = true;
                        let status = props.get("status")?;
                        let now = std::time::SystemTime::now();
                        bridge_ledger::quota::ProviderWait::from_status(status, now)
                            .map(|w| Action::Retry(Some(w)))
                    }
                    "idle" if self.busy => {
                        self.ended = true;
                        Some(Action::Idle)
                    }
                    _ => None,
                }
            }
            "session.idle" => {
                let idle = sid(props)?.as_str() == self.session && self.busy;
                self.ended |= idle;
                idle.then_some(Action::Idle)
            }
            "session.created" | "session.updated" => {
                let info = props.get("info")?;
                let parent = info.get("parentID").and_then(Value::as_str)?;
                let id = info.get("id").and_then(Value::as_str)?;
                if self.family.contains(parent) {
                    self.family.insert(id.to_owned());
                }
                None
            }
            "permission.asked" => {
                if !self.family.contains(sid(props)?.as_str()) {
                    return None;
                }
                let id = props.get("id")?.as_str()?.to_owned();
                let reply = if self.approve { "once" } else { "reject" };
                let stderr = (!self.approve).then(|| {
                    let perm = props
                        .get("permission")
                        .and_then(Value::as_str)
                        .unwrap_or("?");
                    let patterns: Vec<&str> = props
                        .get("patterns")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    format!(
                        "! permission requested: {perm} ({}); auto-rejecting",
                        patterns.join(", ")
                    )
                });
                Some(Action::Permission { id, reply, stderr })
            }
            _ => None,
        }
    }

    fn line(&self, ty: &str, key: &str, value: &Value) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut line = json!({"type": ty, "timestamp": now, "sessionID": self.session});
        line[key] = value.clone();
        line.to_string()
    }
}

/// Whether `messages` (`GET /session/{id}/message`) hold a finished assistant message created at
/// or after `since_ms`: a turn that began and ended (completed, or ended by an error).
pub(crate) fn turn_done_in(messages: &Value, since_ms: u64) -> bool {
    messages.as_array().into_iter().flatten().any(|m| {
        let info = m.get("info").unwrap_or(&Value::Null);
        let created = info
            .pointer("/time/created")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let finished = info
            .pointer("/time/completed")
            .is_some_and(|v| !v.is_null())
            || info.get("error").is_some_and(|e| !e.is_null());
        info.get("role").and_then(Value::as_str) == Some("assistant")
            && created >= since_ms
            && finished
    })
}

/// The `run` line type of a finished part (`None`: `run` prints nothing for it).
fn run_type(part: &Value) -> Option<&'static str> {
    match part.get("type")?.as_str()? {
        "tool" => {
            let status = part.pointer("/state/status").and_then(Value::as_str);
            matches!(status, Some("completed" | "error")).then_some("tool_use")
        }
        "step-start" => Some("step_start"),
        "step-finish" => Some("step_finish"),
        "text" => part
            .pointer("/time/end")
            .filter(|v| !v.is_null())
            .map(|_| "text"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ev(kind: &str, props: Value) -> Value {
        json!({"id": "evt_1", "type": kind, "properties": props})
    }

    /// The frames opencode 1.18.33's `opencode serve` sent while a fake provider answered 429
    /// with `retry-after: 120` and `retry-after: 18446744073709551615` (opencode holds the
    /// latter to setTimeout's 2^31-1 ms, about 24.8 days; the bridge to its horizon).
    #[test]
    fn a_retry_status_is_a_provider_wait() {
        let mut f = Follow::new("ses_a", true);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let retry = |next: Value| {
            ev(
                "session.status",
                json!({"sessionID": "ses_a", "status": {"type": "retry", "attempt": 1,
                    "message": "Rate limit reached for requests", "next": next}}),
            )
        };
        let Some(Action::Retry(Some(w))) = f.on_event(&retry(json!(now_ms + 120_000))) else {
            panic!("no wait")
        };
        assert!(f.started());
        assert_eq!(
            (w.attempt, w.message.as_str()),
            (1, "Rate limit reached for requests")
        );
        assert!(!w.next.clamped && !w.is_quota());
        let left = w.wait_from(std::time::SystemTime::now());
        assert!(left > Duration::from_secs(100) && left <= Duration::from_secs(120));
        let Some(Action::Retry(Some(w))) = f.on_event(&retry(json!(now_ms + 2_147_483_647))) else {
            panic!("no wait")
        };
        assert!(w.next.clamped, "{w:?}");
        assert!(w.wait_from(std::time::SystemTime::now()) > bridge_ledger::quota::LONGEST_WAIT);
        // No time at all: no wait is claimed, never a panic.
        for next in [json!(-1), json!("NaN"), json!(null), json!(1e308)] {
            match f.on_event(&retry(next.clone())) {
                None => {}
                Some(Action::Retry(Some(w))) => assert!(w.next.clamped, "{next}"),
                other => panic!("{next}: {other:?}"),
            }
        }
        assert_eq!(
            f.on_event(&ev(
                "session.status",
                json!({"sessionID": "ses_a", "status": {"type": "busy"}})
            )),
            Some(Action::Retry(None))
        );
    }

    #[test]
    fn the_sessions_parts_become_run_lines_and_the_turn_ends_on_idle() {
        let mut f = Follow::new("ses_a", true);
        // Idle before busy is a previous turn's, or an abort's that came before the turn began.
        assert!(!f.started() && !f.ended());
        assert_eq!(
            f.on_event(&ev(
                "session.status",
                json!({"sessionID": "ses_a", "status": {"type": "idle"}})
            )),
            None
        );
        f.on_event(&ev(
            "session.status",
            json!({"sessionID": "ses_a", "status": {"type": "busy"}}),
        ));
        assert!(f.started() && !f.ended());
        let text = json!({"sessionID": "ses_a", "type": "text", "text": "hi", "time": {"start": 1, "end": 2}});
        let Some(Action::Line(line)) = f.on_event(&ev(
            "message.part.updated",
            json!({"sessionID": "ses_a", "part": text}),
        )) else {
            panic!("no line")
        };
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["type"], "text");
        assert_eq!(v["part"]["text"], "hi");
        assert_eq!(v["sessionID"], "ses_a");
        // Streaming text, running tools and other sessions print nothing.
        for part in [
            json!({"sessionID": "ses_a", "type": "text", "text": "h", "time": {"start": 1}}),
            json!({"sessionID": "ses_a", "type": "tool", "state": {"status": "running"}}),
            json!({"sessionID": "ses_b", "type": "text", "text": "x", "time": {"start": 1, "end": 2}}),
        ] {
            assert_eq!(
                f.on_event(&ev("message.part.updated", json!({"part": part}))),
                None
            );
        }
        let done = json!({"sessionID": "ses_a", "type": "tool", "tool": "bash", "state": {"status": "completed"}});
        assert!(matches!(
            f.on_event(&ev("message.part.updated", json!({"part": done}))),
            Some(Action::Line(l)) if l.contains("\"tool_use\"")
        ));
        assert_eq!(
            f.on_event(&ev(
                "session.error",
                json!({"sessionID": "ses_a", "error": {"name": "APIError"}})
            ))
            .map(|a| matches!(a, Action::Line(l) if l.contains("APIError"))),
            Some(true)
        );
        assert_eq!(f.errors(), 1);
        assert_eq!(
            f.on_event(&ev("session.idle", json!({"sessionID": "ses_a"}))),
            Some(Action::Idle)
        );
        assert!(f.ended());
    }

    #[test]
    fn a_finished_turn_is_found_in_the_messages_only_from_its_start() {
        let messages = json!([
            {"info": {"role": "assistant", "time": {"created": 5, "completed": 6}}},
            {"info": {"role": "user", "time": {"created": 10}}},
        ]);
        // The user message alone: the turn has not begun (or not ended).
        assert!(!turn_done_in(&messages, 10));
        let mut more = messages.as_array().unwrap().clone();
        more.push(json!({"info": {"role": "assistant", "time": {"created": 11}}}));
        assert!(!turn_done_in(&Value::from(more.clone()), 10));
        more.push(json!({"info": {"role": "assistant", "time": {"created": 12}, "error": {"name": "MessageAbortedError"}}}));
        assert!(turn_done_in(&Value::from(more), 10));
        // An earlier turn's finished reply counts only when asked from before it.
        assert!(turn_done_in(&messages, 0));
        assert!(!turn_done_in(&json!({"not": "a list"}), 0));
    }

    #[test]
    fn a_turn_is_replayed_from_its_messages() {
        let mut f = Follow::resumed("ses_a", false, false);
        let messages = json!([
            {"info": {"role": "assistant", "time": {"created": 5}}, "parts": [
                {"sessionID": "ses_a", "type": "text", "text": "old", "time": {"start": 1, "end": 2}}]},
            {"info": {"role": "user", "time": {"created": 10}}, "parts": [
                {"sessionID": "ses_a", "type": "text", "text": "ask", "time": {"start": 1, "end": 2}}]},
            {"info": {"role": "assistant", "time": {"created": 11}, "error": {"name": "APIError"}}, "parts": [
                {"sessionID": "ses_a", "type": "step-start"},
                {"sessionID": "ses_a", "type": "tool", "state": {"status": "completed"}},
                {"sessionID": "ses_a", "type": "text", "text": "new", "time": {"start": 1, "end": 2}}]}
        ]);
        let lines = f.replay(&messages, 10);
        let types: Vec<String> = lines
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(types, ["step_start", "tool_use", "text", "error"]);
        assert!(lines[2].contains("\"new\""));
        assert_eq!(f.errors(), 1);
    }

    #[test]
    fn permission_asks_of_the_session_and_its_children_are_answered() {
        let mut ro = Follow::new("ses_a", false);
        ro.on_event(&ev(
            "session.created",
            json!({"info": {"id": "ses_child", "parentID": "ses_a"}}),
        ));
        let ask = |s: &str| {
            ev(
                "permission.asked",
                json!({"id": "per_1", "sessionID": s, "permission": "bash", "patterns": ["touch x"]}),
            )
        };
        let Some(Action::Permission { id, reply, stderr }) = ro.on_event(&ask("ses_child")) else {
            panic!("a child's ask is answered")
        };
        assert_eq!((id.as_str(), reply), ("per_1", "reject"));
        assert_eq!(
            stderr.as_deref(),
            Some("! permission requested: bash (touch x); auto-rejecting")
        );
        assert_eq!(ro.on_event(&ask("ses_other")), None);
        let mut edit = Follow::new("ses_a", true);
        assert!(matches!(
            edit.on_event(&ask("ses_a")),
            Some(Action::Permission {
                reply: "once",
                stderr: None,
                ..
            })
        ));
    }
}
