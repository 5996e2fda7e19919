//! Derives a session's [`SessionState`] from its last messages plus outside liveness knowledge.
//!
//! Every backend uses [`derive_state`], so a session reads the same whichever backend read it.
//! The rules, in order (also in `docs/API-NOTES.md`):
//!
//! 1. The session is in `ctx.liveness.busy` → **running**. The service (or a live process of
//!    ours) knows the loop is active; this beats whatever the store shows, e.g. the short gap
//!    between a finished tool step and the next assistant message, or a new prompt on an old
//!    session.
//! 2. The last message is a user message (no reply written yet), or there is no assistant
//!    message at all → *no outcome* (rule 7).
//! 3. The last assistant message has an error: `MessageAbortedError` → **interrupted**; any other
//!    name → **failed**, with `Name: message` as the error text.
//! 4. It is completed (`time.completed` set) with finish `tool-calls`: the loop stopped after a
//!    tool step without a following message. If a tool part of that message was refused a
//!    permission ("…rejected permission…") → **interrupted**, with the error text
//!    `permission rejected: <tool>`: the (auto-)rejection ended the run, as `opencode run` does
//!    with exit code 0, but the work was not done, so neither succeeded nor failed fits.
//!    Otherwise it is the normal hand-over to the next step → *no outcome* (rule 7).
//! 5. It is completed with no finish at all → **interrupted**: the loop was stopped before the
//!    model answered. opencode 1.18.33 writes exactly this (completed, no finish, no error, no
//!    parts) when a run is aborted while it waits to retry a provider error.
//! 6. It is completed with any other finish (`stop`, `length`, `content-filter`, …) →
//!    **succeeded**.
//! 7. *No outcome* (the message has neither `time.completed` nor an error, or rules 2/4 sent us
//!    here): the session is in `ctx.liveness.gone` → **interrupted** (its process is known to have
//!    ended: killed or crashed); quiet for at least [`STALE_AFTER`] (`ctx.now_ms -
//!    last_activity_ms`) → **stale?**; else → **running**.
//!
//! `last_activity_ms` is the newest activity time the caller knows: at least the session's
//! `time_updated`, ideally also the last message's and its parts' update times.

use crate::decode::error_text;
use crate::model::{Message, Part, STALE_AFTER, SessionState, ToolStatus};
use crate::source::ScanContext;

/// The state of a session and, for failed or permission-stopped sessions, the reason.
///
/// - `last_assistant`: the newest assistant message of the session, with its parts (parts are
///   only looked at for rule 4; pass them when its finish is `tool-calls`);
/// - `last_message_is_user`: the newest message of the session is a user message;
/// - `last_activity_ms`: newest known update time (session, message or part), epoch ms;
/// - `session_id`: looked up in `ctx.liveness`.
pub fn derive_state(
    last_assistant: Option<&Message>,
    last_message_is_user: bool,
    last_activity_ms: i64,
    session_id: &str,
    ctx: &ScanContext,
) -> (SessionState, Option<String>) {
    if ctx.liveness.busy.contains(session_id) {
        return (SessionState::Running, None);
    }
    if !last_message_is_user && let Some(m) = last_assistant {
        if let Some(err) = &m.error {
            if err.name == "MessageAbortedError" {
                return (SessionState::Interrupted, None);
            }
            return (SessionState::Failed, Some(error_text(err)));
        }
        if m.completed_ms.is_some() {
            match m.finish.as_deref() {
                None => return (SessionState::Interrupted, None),
                Some("tool-calls") => {}
                Some(_) => return (SessionState::Succeeded, None),
            }
            if let Some(tool) = rejected_tool(m) {
                return (
                    SessionState::Interrupted,
                    Some(format!("permission rejected: {tool}")),
                );
            }
        }
    }
    (no_outcome(last_activity_ms, session_id, ctx), None)
}

/// True when `derive_state` needs the parts of this assistant message (rule 4).
pub fn needs_parts(last_assistant: &Message) -> bool {
    last_assistant.error.is_none()
        && last_assistant.completed_ms.is_some()
        && last_assistant.finish.as_deref() == Some("tool-calls")
}

/// Whether a tool output is opencode's "permission rejected" text.
pub fn is_permission_rejection(text: &str) -> bool {
    text.to_ascii_lowercase().contains("rejected permission")
}

fn rejected_tool(m: &Message) -> Option<&str> {
    m.parts.iter().find_map(|p| match p {
        Part::Tool {
            tool,
            status: ToolStatus::Error,
            output: Some(out),
            ..
        } if is_permission_rejection(out) => Some(tool.as_str()),
        _ => None,
    })
}

fn no_outcome(last_activity_ms: i64, session_id: &str, ctx: &ScanContext) -> SessionState {
    if ctx.liveness.gone.contains(session_id) {
        return SessionState::Interrupted;
    }
    let quiet_ms = ctx.now_ms.saturating_sub(last_activity_ms);
    if quiet_ms >= STALE_AFTER.as_millis() as i64 {
        SessionState::Stale
    } else {
        SessionState::Running
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_message, decode_part};
    use crate::source::Liveness;
    use serde_json::json;
    use std::time::Instant;

    const NOW: i64 = 1_800_000_000_000;
    const MIN: i64 = 60_000;

    fn ctx(busy: &[&str], gone: &[&str]) -> ScanContext {
        ScanContext {
            deadline: Instant::now(),
            now_ms: NOW,
            liveness: Liveness {
                busy: busy.iter().map(|s| s.to_string()).collect(),
                gone: gone.iter().map(|s| s.to_string()).collect(),
            },
        }
    }

    fn assistant(extra: serde_json::Value, parts: Vec<serde_json::Value>) -> Message {
        let mut data = json!({"role":"assistant","agent":"build","modelID":"ok","providerID":"fk","time":{"created":NOW - 5 * MIN}});
        for (k, v) in extra.as_object().unwrap() {
            if k == "completed" {
                data["time"]["completed"] = v.clone();
            } else {
                data[k] = v.clone();
            }
        }
        decode_message("msg_a", &data, parts.iter().map(decode_part).collect())
    }

    fn state(m: Option<&Message>, user_last: bool, activity: i64, c: &ScanContext) -> SessionState {
        derive_state(m, user_last, activity, "ses_1", c).0
    }

    #[test]
    fn finished_is_succeeded_for_stop_and_length() {
        let c = ctx(&[], &[]);
        for finish in ["stop", "length", "content-filter"] {
            let m = assistant(json!({"completed": NOW - MIN, "finish": finish}), vec![]);
            assert_eq!(
                derive_state(Some(&m), false, NOW - 2 * 60 * MIN, "ses_1", &c),
                (SessionState::Succeeded, None)
            );
        }
    }

    #[test]
    fn completed_without_finish_is_interrupted() {
        // What opencode writes when a run is aborted during a retry wait.
        let m = assistant(json!({"completed": NOW - MIN}), vec![]);
        assert_eq!(
            derive_state(Some(&m), false, NOW - MIN, "ses_1", &ctx(&[], &[])),
            (SessionState::Interrupted, None)
        );
    }

    #[test]
    fn error_is_failed_and_abort_is_interrupted() {
        let c = ctx(&[], &["ses_1"]);
        let m = assistant(
            json!({"completed": NOW, "error":{"name":"APIError","data":{"message":"Rate limit reached","statusCode":429}}}),
            vec![],
        );
        assert_eq!(
            derive_state(Some(&m), false, NOW, "ses_1", &c),
            (
                SessionState::Failed,
                Some("APIError: Rate limit reached".into())
            )
        );
        let a = assistant(
            json!({"completed": NOW, "error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}),
            vec![],
        );
        assert_eq!(
            derive_state(Some(&a), false, NOW, "ses_1", &c),
            (SessionState::Interrupted, None)
        );
    }

    #[test]
    fn no_outcome_uses_liveness_then_staleness() {
        let dangling = assistant(json!({}), vec![]);
        let recent = NOW - 44 * MIN;
        let old = NOW - 45 * MIN;
        assert_eq!(
            state(Some(&dangling), false, recent, &ctx(&[], &[])),
            SessionState::Running
        );
        assert_eq!(
            state(Some(&dangling), false, old, &ctx(&[], &[])),
            SessionState::Stale
        );
        assert_eq!(
            state(Some(&dangling), false, old, &ctx(&["ses_1"], &[])),
            SessionState::Running
        );
        assert_eq!(
            state(Some(&dangling), false, recent, &ctx(&[], &["ses_1"])),
            SessionState::Interrupted
        );
        assert_eq!(
            state(None, true, recent, &ctx(&[], &[])),
            SessionState::Running
        );
        assert_eq!(state(None, false, old, &ctx(&[], &[])), SessionState::Stale);
    }

    #[test]
    fn user_message_after_an_outcome_means_a_new_turn() {
        let done = assistant(json!({"completed": NOW - MIN, "finish":"stop"}), vec![]);
        assert_eq!(
            state(Some(&done), true, NOW - MIN, &ctx(&[], &[])),
            SessionState::Running
        );
        assert_eq!(
            state(Some(&done), true, NOW - 50 * MIN, &ctx(&[], &[])),
            SessionState::Stale
        );
    }

    #[test]
    fn busy_beats_a_stored_outcome() {
        let failed = assistant(
            json!({"completed": NOW, "error":{"name":"UnknownError","data":{"message":"x"}}}),
            vec![],
        );
        assert_eq!(
            state(Some(&failed), false, NOW, &ctx(&["ses_1"], &[])),
            SessionState::Running
        );
    }

    #[test]
    fn tool_calls_finish_with_rejected_permission_is_interrupted() {
        let m = assistant(
            json!({"completed": NOW - MIN, "finish":"tool-calls"}),
            vec![
                json!({"type":"step-start"}),
                json!({"type":"tool","tool":"read","state":{"status":"error","input":{},"error":"The user rejected permission to use this specific tool call."}}),
                json!({"type":"step-finish","reason":"tool-calls"}),
            ],
        );
        assert!(needs_parts(&m));
        assert_eq!(
            derive_state(Some(&m), false, NOW - MIN, "ses_1", &ctx(&[], &[])),
            (
                SessionState::Interrupted,
                Some("permission rejected: read".into())
            )
        );
    }

    #[test]
    fn tool_calls_finish_without_rejection_has_no_outcome() {
        let m = assistant(
            json!({"completed": NOW - MIN, "finish":"tool-calls"}),
            vec![
                json!({"type":"tool","tool":"bash","state":{"status":"completed","input":{},"output":"ok"}}),
            ],
        );
        assert_eq!(
            state(Some(&m), false, NOW - MIN, &ctx(&[], &[])),
            SessionState::Running
        );
        assert_eq!(
            state(Some(&m), false, NOW - MIN, &ctx(&[], &["ses_1"])),
            SessionState::Interrupted
        );
        assert_eq!(
            state(Some(&m), false, NOW - 46 * MIN, &ctx(&[], &[])),
            SessionState::Stale
        );
    }
}
