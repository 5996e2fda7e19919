//! How a finished `opencode run` attempt is judged: its events, its stderr and its exit.

use crate::classify::{
    ExitInfo, Failure, FailureKind, agent_fallback_line, classify_error, classify_text,
    rejected_permission_lines, stderr_tail, unknown_option_line,
};
use crate::runner::opencode::events::RunSummary;

/// Classifies a finished run. `None` means it succeeded.
///
/// Order of the rules: an agent fallback on stderr; an error event not followed by a finished
/// step (a recovered error does not fail the run even though 1.x exits 1); a permission that
/// was auto-rejected with nothing after it; a last step cut by the output limit; a signal or a
/// non-zero exit with no error event; a run that printed no event at all.
pub fn classify(summary: &RunSummary, stderr: &str, exit: ExitInfo) -> Option<Failure> {
    if let Some(line) = agent_fallback_line(stderr) {
        return Some(Failure::with_advice(
            FailureKind::Agent,
            line,
            "opencode ran its default agent instead of the one asked for. Check the name with `opencode agent list`; an agent with `mode: subagent` must be started by the bridge with its mode overridden (pass its opencode mode in the task).",
        ));
    }
    if let Some(last) = summary.errors().last()
        && !summary.finished_after_error()
    {
        let mut f = classify_error(last);
        if summary.errors().len() > 1 {
            f.message = format!("{} ({} error events)", f.message, summary.errors().len());
        }
        return Some(f);
    }
    let rejected = rejected_permission_lines(stderr);
    let last_tool_rejected = summary
        .tool_calls()
        .last()
        .is_some_and(|c| c.permission_rejected());
    if last_tool_rejected && summary.last_finish_reason().as_deref() != Some("stop") {
        let call = summary.tool_calls().last().cloned();
        let what = rejected.first().cloned().unwrap_or_else(|| {
            call.map(|c| format!("tool `{}` was refused", c.tool))
                .unwrap_or_default()
        });
        return Some(Failure::with_advice(
            FailureKind::Agent,
            format!("permission auto-rejected, the run stopped: {what}"),
            "A tool call needed a permission that non-interactive runs refuse (e.g. a path outside the task's directory) and opencode stopped the run. Keep the work inside the task's cwd, or use an agent whose permissions allow it.",
        ));
    }
    if summary.last_finish_reason().as_deref() == Some("length") {
        return Some(Failure::new(
            FailureKind::OutputLimit,
            "the model stopped at its output-token limit (finish reason `length`); the answer is cut off",
        ));
    }
    let stderr_tail = stderr_tail(stderr);
    if let Some(sig) = exit.signal {
        return Some(Failure::new(
            FailureKind::Exit,
            format!("opencode was killed by signal {sig}. {stderr_tail}"),
        ));
    }
    match exit.code {
        Some(0) | None => {}
        Some(code) => {
            if summary.events() == 0
                && let Some(line) = unknown_option_line(stderr)
            {
                return Some(Failure::with_advice(
                    FailureKind::OutdatedRunner,
                    format!("opencode exited with code {code}: {line}"),
                    "opencode is older than the bridge needs (it rejected a flag the bridge passes). Upgrade it: npm i -g opencode-ai@1.18.33; `opencode-bridge doctor` shows the version and the run flags it has.",
                ));
            }
            if summary.errors().is_empty() {
                let kind = classify_text(&stderr_tail).unwrap_or(FailureKind::Exit);
                let kind = if kind == FailureKind::Exit || summary.events() > 0 {
                    FailureKind::Exit
                } else {
                    kind
                };
                return Some(Failure::new(
                    kind,
                    format!("opencode exited with code {code}. {stderr_tail}"),
                ));
            }
        }
    }
    if summary.events() == 0 {
        return Some(Failure::new(
            FailureKind::Exit,
            format!("opencode printed no events. {stderr_tail}"),
        ));
    }
    if summary.ended_mid_line() {
        return Some(Failure::with_advice(
            FailureKind::Exit,
            "opencode's output ended in the middle of an event line: it exited before everything it printed was read, so the end of the run's events (answer text, tokens) is lost here",
            "The session itself holds the whole answer: read it with opencode_session_output and the task's session id. Seen with very long answers when the run's output had to go through a pipe.",
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(lines: &[&str]) -> RunSummary {
        let mut s = RunSummary::new(1 << 20);
        for l in lines {
            assert!(s.push_line(l), "bad test line {l}");
        }
        s
    }

    fn err_line(error: &str) -> String {
        format!(r#"{{"type":"error","timestamp":1,"sessionID":"ses_t","error":{error}}}"#)
    }

    fn api(status: Option<u16>, message: &str, body: &str, retry: bool) -> String {
        let mut data = serde_json::json!({"message": message, "isRetryable": retry, "responseBody": body, "metadata": {"url": "http://127.0.0.1:1/v1/chat/completions"}});
        if let Some(s) = status {
            data["statusCode"] = s.into();
        }
        err_line(&serde_json::json!({"name": "APIError", "data": data}).to_string())
    }

    fn kind_of(line: &str) -> FailureKind {
        classify(
            &summary(&[line]),
            "",
            ExitInfo {
                code: Some(1),
                signal: None,
            },
        )
        .expect("a failure")
        .kind
    }

    #[test]
    fn output_cut_in_the_middle_of_a_line_is_a_failure_not_a_success() {
        let ok = ExitInfo {
            code: Some(0),
            signal: None,
        };
        let mut s =
            summary(&[r#"{"type":"step_start","sessionID":"ses_t","part":{"messageID":"m1"}}"#]);
        assert!(classify(&s, "", ok).is_none());
        s.note_ended_mid_line();
        let f = classify(&s, "", ok).expect("a failure");
        assert_eq!(f.kind, FailureKind::Exit);
        assert!(
            f.message.contains("middle of an event line"),
            "{}",
            f.message
        );
        assert!(f.advice.contains("opencode_session_output"), "{}", f.advice);
    }

    #[test]
    fn provider_errors_map_to_kinds() {
        let cases: Vec<(String, FailureKind)> = vec![
            (
                api(
                    Some(401),
                    "Incorrect API key provided: sk-xxx.",
                    r#"{"error": {"message": "Incorrect API key provided: sk-xxx.", "type": "invalid_request_error", "code": "invalid_api_key"}}"#,
                    false,
                ),
                FailureKind::Auth,
            ),
            (api(Some(403), "Forbidden", "{}", false), FailureKind::Auth),
            (
                api(
                    Some(404),
                    "The model `gpt-9` does not exist or you do not have access to it.",
                    r#"{"error": {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error", "param": null, "code": "model_not_found"}}"#,
                    false,
                ),
                FailureKind::Model,
            ),
            (
                api(
                    Some(429),
                    "Rate limit reached for requests",
                    r#"{"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}"#,
                    true,
                ),
                FailureKind::RateLimit,
            ),
            (
                api(
                    Some(429),
                    "You exceeded your current quota, please check your plan and billing details.",
                    r#"{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}"#,
                    true,
                ),
                FailureKind::Quota,
            ),
            (
                api(
                    Some(529),
                    "Overloaded",
                    r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
                    true,
                ),
                FailureKind::Overloaded,
            ),
            (
                api(
                    Some(503),
                    r#"Service Unavailable: {"error": {"message": "Service Unavailable", "type": "server_error"}}"#,
                    r#"{"error": {"message": "Service Unavailable", "type": "server_error"}}"#,
                    true,
                ),
                FailureKind::Overloaded,
            ),
            (
                api(Some(500), "Internal Server Error", "", true),
                FailureKind::Overloaded,
            ),
            (
                api(
                    Some(400),
                    "Bad Request: invalid tool schema",
                    r#"{"error":{"message":"invalid tool schema"}}"#,
                    false,
                ),
                FailureKind::InvalidRequest,
            ),
            (
                api(
                    None,
                    "Cannot connect to API: Unable to connect. Is the computer able to access the url?",
                    "",
                    true,
                ),
                FailureKind::Network,
            ),
            (
                err_line(
                    r#"{"name":"ContextOverflowError","data":{"message":"This model's maximum context length is 128000 tokens.","responseBody":"{}"}}"#,
                ),
                FailureKind::ContextLength,
            ),
            (
                err_line(
                    r#"{"name":"ProviderAuthError","data":{"providerID":"nokey","message":"Anthropic API key is missing. Pass it using the 'apiKey' parameter or the ANTHROPIC_API_KEY environment variable."}}"#,
                ),
                FailureKind::Auth,
            ),
            (
                err_line(
                    r#"{"name":"UnknownError","data":{"message":"Unexpected server error. Check server logs for details.","ref":"err_bcb94fe7"}}"#,
                ),
                FailureKind::Model,
            ),
            (
                err_line(
                    r#"{"name":"UnknownError","data":{"message":"{\"message\":\"upstream model crashed\",\"type\":\"server_error\",\"code\":\"server_error\"}"}}"#,
                ),
                FailureKind::Overloaded,
            ),
            (
                err_line(
                    r#"{"name":"UnknownError","data":{"message":"{\"message\":\"context too big\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"}"}}"#,
                ),
                FailureKind::ContextLength,
            ),
            (
                err_line(r#"{"name":"MessageOutputLengthError","data":{}}"#),
                FailureKind::OutputLimit,
            ),
            (
                err_line(r#"{"name":"MessageAbortedError","data":{"message":"aborted"}}"#),
                FailureKind::Exit,
            ),
            (
                err_line(r#"{"name":"ContentFilterError","data":{"message":"blocked"}}"#),
                FailureKind::InvalidRequest,
            ),
            (
                err_line(r#"{"name":"UnknownError","data":{"message":"something odd"}}"#),
                FailureKind::Exit,
            ),
        ];
        for (line, kind) in cases {
            assert_eq!(kind_of(&line), kind, "{line}");
        }
    }

    #[test]
    fn failure_keeps_provider_message_and_advice() {
        let line = api(Some(429), "Rate limit reached for requests", "{}", true);
        let f = classify(
            &summary(&[&line]),
            "",
            ExitInfo {
                code: Some(1),
                signal: None,
            },
        )
        .unwrap();
        assert!(
            f.message.contains("Rate limit reached for requests"),
            "{}",
            f.message
        );
        assert!(f.message.contains("HTTP 429"));
        assert!(f.advice.contains("Wait"));
        assert!(f.kind.is_transient());
        assert!(!FailureKind::Quota.is_transient());
    }

    #[test]
    fn recovered_error_is_success_despite_exit_1() {
        let s = summary(&[
            &err_line(
                r#"{"name":"ContextOverflowError","data":{"message":"maximum context length is 10 tokens"}}"#,
            ),
            r#"{"type":"step_start","sessionID":"s","part":{"messageID":"m"}}"#,
            r#"{"type":"text","sessionID":"s","part":{"messageID":"m","text":"DONE"}}"#,
            r#"{"type":"step_finish","sessionID":"s","part":{"messageID":"m","reason":"stop"}}"#,
        ]);
        assert_eq!(
            classify(
                &s,
                "",
                ExitInfo {
                    code: Some(1),
                    signal: None
                }
            ),
            None
        );
    }

    #[test]
    fn length_finish_is_output_limit() {
        let s = summary(&[
            r#"{"type":"text","sessionID":"s","part":{"messageID":"m","text":"truncated answ"}}"#,
            r#"{"type":"step_finish","sessionID":"s","part":{"messageID":"m","reason":"length"}}"#,
        ]);
        let f = classify(
            &s,
            "",
            ExitInfo {
                code: Some(0),
                signal: None,
            },
        )
        .unwrap();
        assert_eq!(f.kind, FailureKind::OutputLimit);
    }

    #[test]
    fn auto_rejected_permission_fails_as_agent() {
        let s = summary(&[
            r#"{"type":"tool_use","sessionID":"s","part":{"tool":"read","messageID":"m","state":{"status":"error","error":"The user rejected permission to use this specific tool call."}}}"#,
            r#"{"type":"step_finish","sessionID":"s","part":{"messageID":"m","reason":"tool-calls"}}"#,
        ]);
        let stderr = "\u{1b}[93m\u{1b}[1m! \u{1b}[0mpermission requested: external_directory (/nonexistent/*); auto-rejecting\n";
        let f = classify(
            &s,
            stderr,
            ExitInfo {
                code: Some(0),
                signal: None,
            },
        )
        .unwrap();
        assert_eq!(f.kind, FailureKind::Agent);
        assert!(
            f.message.contains("external_directory (/nonexistent/*)"),
            "{}",
            f.message
        );
    }

    #[test]
    fn agent_fallback_on_stderr_fails_the_task() {
        let ok = summary(&[
            r#"{"type":"text","sessionID":"s","part":{"messageID":"m","text":"hi"}}"#,
            r#"{"type":"step_finish","sessionID":"s","part":{"messageID":"m","reason":"stop"}}"#,
        ]);
        for line in [
            "! agent \"nope\" not found. Falling back to default agent",
            "! agent \"reviewer\" is a subagent, not a primary agent. Falling back to default agent",
        ] {
            let f = classify(
                &ok,
                line,
                ExitInfo {
                    code: Some(0),
                    signal: None,
                },
            )
            .unwrap();
            assert_eq!(f.kind, FailureKind::Agent);
            assert!(f.message.contains("Falling back"));
        }
        assert_eq!(
            classify(
                &ok,
                "",
                ExitInfo {
                    code: Some(0),
                    signal: None
                }
            ),
            None
        );
    }

    #[test]
    fn exit_codes_and_signals_without_events() {
        let empty = summary(&[]);
        let f = classify(
            &empty,
            "boom: database is locked",
            ExitInfo {
                code: Some(3),
                signal: None,
            },
        )
        .unwrap();
        assert_eq!(f.kind, FailureKind::Exit);
        assert!(f.message.contains("code 3") && f.message.contains("database is locked"));
        let f = classify(
            &empty,
            "",
            ExitInfo {
                code: None,
                signal: Some(9),
            },
        )
        .unwrap();
        assert_eq!(f.kind, FailureKind::Exit);
        assert!(f.message.contains("signal 9"));
        let f = classify(
            &empty,
            "",
            ExitInfo {
                code: Some(0),
                signal: None,
            },
        )
        .unwrap();
        assert!(f.message.contains("no events"));
    }

    #[test]
    fn every_kind_has_a_name_and_advice() {
        for k in FailureKind::ALL {
            assert!(!k.as_str().is_empty());
            assert!(k.advice().len() > 30);
        }
    }
}
