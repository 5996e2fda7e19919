//! Parsing of `opencode run --format json` event lines.
//!
//! opencode 1.18.33 prints one JSON object per line with a `type` of `step_start`, `text`,
//! `reasoning`, `tool_use`, `step_finish` or `error`. Parsing is tolerant: unknown types are
//! kept (counted and remembered by name), malformed lines are counted, nothing is fatal.
//! [`RunSummary`] folds the lines of one run into what a caller needs: the session id, the
//! text the agent wrote, its tool calls, tokens, cost and error events.

use serde_json::Value;

use crate::capture::HeadTail;

/// Token counts summed over every `step_finish` of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Input tokens (opencode excludes cache reads from this number).
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
    /// Tokens read from the provider's cache.
    pub cache_read: u64,
    /// Tokens written to the provider's cache.
    pub cache_write: u64,
}

/// One tool call, as printed by opencode once it completed or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Tool name (`bash`, `write`, `read`, `task`, ...).
    pub tool: String,
    /// `completed` or `error` (opencode prints no other state).
    pub status: String,
    /// The title opencode gave the call (a command, a file path, ...).
    pub title: Option<String>,
    /// The error text for a failed call.
    pub error: Option<String>,
}

impl ToolCall {
    /// True when the call failed because a permission was rejected (auto-reject in `run`).
    pub fn permission_rejected(&self) -> bool {
        self.status == "error"
            && self
                .error
                .as_deref()
                .is_some_and(|e| e.contains("rejected permission"))
    }
}

/// An `error` event: opencode's NamedError `{name, data}` flattened.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorEvent {
    /// Error name, e.g. `APIError`, `ContextOverflowError`, `UnknownError`.
    pub name: String,
    /// `data.message` (empty when absent).
    pub message: String,
    /// `data.statusCode` for API errors.
    pub status_code: Option<u16>,
    /// `data.isRetryable` for API errors.
    pub is_retryable: Option<bool>,
    /// `data.responseBody` (raw text) when present.
    pub response_body: Option<String>,
    /// The whole `error` object as received.
    pub raw: Value,
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `step_start`: a model call began (repeated with one messageID when opencode retries).
    StepStart {
        /// The assistant message id.
        message_id: Option<String>,
    },
    /// `text`: a complete text part.
    Text {
        /// The assistant message id.
        message_id: Option<String>,
        /// The text.
        text: String,
        /// opencode-generated text (e.g. the compaction continuation), not the model's words.
        synthetic: bool,
    },
    /// `reasoning`: a complete reasoning part (only printed with `--thinking`).
    Reasoning {
        /// The reasoning text.
        text: String,
    },
    /// `tool_use`: a completed or failed tool call.
    ToolUse(ToolCall),
    /// `step_finish`: a model call ended.
    StepFinish {
        /// The assistant message id.
        message_id: Option<String>,
        /// AI-SDK finish reason: `stop`, `tool-calls`, `length`, ...
        reason: Option<String>,
        /// Tokens of this step.
        tokens: TokenUsage,
        /// Cost of this step.
        cost: f64,
    },
    /// `error`: a session error.
    Error(ErrorEvent),
    /// A JSON object with a type this parser does not know.
    Unknown {
        /// The `type` field, or empty when missing.
        kind: String,
    },
}

/// A line together with the session id found in its envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedLine {
    /// `sessionID` of the envelope.
    pub session_id: Option<String>,
    /// The event.
    pub event: Event,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for key in path {
        cur = cur.get(key)?;
    }
    cur.as_str()
}

fn u64_at(v: &Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for key in path {
        match cur.get(key) {
            Some(next) => cur = next,
            None => return 0,
        }
    }
    cur.as_u64()
        .or_else(|| cur.as_f64().map(|f| f.max(0.0) as u64))
        .unwrap_or(0)
}

/// Parses one line of `--format json` output. Returns `None` for a blank line or a line that
/// is not a JSON object (the caller counts it as malformed).
pub fn parse_line(line: &str) -> Option<ParsedLine> {
    let trimmed = line.trim();
    if trimmed.is_empty() {
        return None;
    }
    let v: Value = serde_json::from_str(trimmed).ok()?;
    let obj = v.as_object()?;
    let session_id = obj
        .get("sessionID")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let kind = obj.get("type").and_then(Value::as_str).unwrap_or("");
    let part = obj.get("part").cloned().unwrap_or(Value::Null);
    let message_id = str_at(&part, &["messageID"]).map(str::to_owned);
    let event = match kind {
        "step_start" => Event::StepStart { message_id },
        "text" => Event::Text {
            message_id,
            text: str_at(&part, &["text"]).unwrap_or("").to_owned(),
            synthetic: part.get("synthetic").and_then(Value::as_bool) == Some(true),
        },
        "reasoning" => Event::Reasoning {
            text: str_at(&part, &["text"]).unwrap_or("").to_owned(),
        },
        "tool_use" => Event::ToolUse(ToolCall {
            tool: str_at(&part, &["tool"]).unwrap_or("?").to_owned(),
            status: str_at(&part, &["state", "status"])
                .unwrap_or("?")
                .to_owned(),
            title: str_at(&part, &["state", "title"]).map(str::to_owned),
            error: str_at(&part, &["state", "error"]).map(str::to_owned),
        }),
        "step_finish" => Event::StepFinish {
            message_id,
            reason: str_at(&part, &["reason"]).map(str::to_owned),
            tokens: TokenUsage {
                input: u64_at(&part, &["tokens", "input"]),
                output: u64_at(&part, &["tokens", "output"]),
                reasoning: u64_at(&part, &["tokens", "reasoning"]),
                cache_read: u64_at(&part, &["tokens", "cache", "read"]),
                cache_write: u64_at(&part, &["tokens", "cache", "write"]),
            },
            cost: part.get("cost").and_then(Value::as_f64).unwrap_or(0.0),
        },
        "error" => Event::Error(parse_error(obj.get("error").unwrap_or(&Value::Null))),
        other => Event::Unknown {
            kind: other.to_owned(),
        },
    };
    Some(ParsedLine { session_id, event })
}

/// Flattens an opencode error object. Accepts the NamedError shape `{name, data:{...}}`, a
/// plain `{message}` / `{type, message}` (later opencode versions), or a bare string.
pub fn parse_error(err: &Value) -> ErrorEvent {
    let data = err.get("data").filter(|d| d.is_object()).unwrap_or(err);
    let name = err
        .get("name")
        .and_then(Value::as_str)
        .or_else(|| err.get("type").and_then(Value::as_str))
        .unwrap_or("Error")
        .to_owned();
    let message = data
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| err.as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            if err.is_null() {
                String::new()
            } else {
                err.to_string()
            }
        });
    ErrorEvent {
        name,
        message,
        status_code: data
            .get("statusCode")
            .or_else(|| data.get("status"))
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok()),
        is_retryable: data.get("isRetryable").and_then(Value::as_bool),
        response_body: data
            .get("responseBody")
            .and_then(Value::as_str)
            .map(str::to_owned),
        raw: err.clone(),
    }
}

/// Everything learnt from the event lines of one run (one attempt).
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The root session id.
    pub session_id: Option<String>,
    /// Every event line count by kind.
    pub events: usize,
    /// Lines that were not JSON objects.
    pub malformed: usize,
    /// Lines with a type this parser does not know, by type name (first 20 distinct names).
    pub unknown_types: Vec<String>,
    /// Count of lines with unknown types.
    pub unknown: usize,
    /// `step_start` count.
    pub steps: usize,
    /// Tool calls in order.
    pub tool_calls: Vec<ToolCall>,
    /// Error events in order.
    pub errors: Vec<ErrorEvent>,
    /// `ContextOverflowError` events seen.
    pub overflows: usize,
    /// Token totals.
    pub tokens: TokenUsage,
    /// Cost total.
    pub cost: f64,
    /// Finish reason of the last `step_finish`.
    pub last_finish_reason: Option<String>,
    /// True when a `step_finish` came after the last error event (the run recovered).
    pub finished_after_error: bool,
    /// Text the model wrote (non-synthetic text parts, separated by blank lines), bounded.
    pub text: HeadTail,
    /// The text parts of the last assistant message that had text.
    pub final_text: String,
    final_message: Option<String>,
    /// True when any non-synthetic text or any tool call was seen (drives the retry rule).
    pub produced_output: bool,
}

impl RunSummary {
    /// An empty summary whose text buffer keeps at most `text_cap` bytes.
    pub fn new(text_cap: usize) -> Self {
        RunSummary {
            session_id: None,
            events: 0,
            malformed: 0,
            unknown_types: Vec::new(),
            unknown: 0,
            steps: 0,
            tool_calls: Vec::new(),
            errors: Vec::new(),
            overflows: 0,
            tokens: TokenUsage::default(),
            cost: 0.0,
            last_finish_reason: None,
            finished_after_error: false,
            text: HeadTail::new(text_cap),
            final_text: String::new(),
            final_message: None,
            produced_output: false,
        }
    }

    /// Folds one raw output line into the summary. Returns true if it was a valid event.
    pub fn push_line(&mut self, line: &str) -> bool {
        if line.trim().is_empty() {
            return false;
        }
        match parse_line(line) {
            Some(parsed) => {
                self.push(parsed);
                true
            }
            None => {
                self.malformed += 1;
                false
            }
        }
    }

    /// Folds one parsed event into the summary.
    pub fn push(&mut self, parsed: ParsedLine) {
        self.events += 1;
        if self.session_id.is_none() {
            self.session_id = parsed.session_id;
        }
        match parsed.event {
            Event::StepStart { .. } => self.steps += 1,
            Event::Text {
                message_id,
                text,
                synthetic,
            } => {
                if synthetic {
                    return;
                }
                self.produced_output = true;
                if !self.text.is_empty() {
                    self.text.push(b"\n\n");
                }
                self.text.push(text.as_bytes());
                const FINAL_CAP: usize = 400_000;
                if message_id.is_some() && message_id == self.final_message {
                    if !self.final_text.is_empty() {
                        self.final_text.push_str("\n\n");
                    }
                    if self.final_text.len() < FINAL_CAP {
                        self.final_text.push_str(&text);
                    }
                } else {
                    self.final_message = message_id;
                    self.final_text = text;
                }
                if self.final_text.len() > FINAL_CAP {
                    let mut cut = FINAL_CAP;
                    while !self.final_text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    self.final_text.truncate(cut);
                }
            }
            Event::Reasoning { .. } => {}
            Event::ToolUse(call) => {
                self.produced_output = true;
                self.tool_calls.push(call);
            }
            Event::StepFinish {
                reason,
                tokens,
                cost,
                ..
            } => {
                self.tokens.input = self.tokens.input.saturating_add(tokens.input);
                self.tokens.output = self.tokens.output.saturating_add(tokens.output);
                self.tokens.reasoning = self.tokens.reasoning.saturating_add(tokens.reasoning);
                self.tokens.cache_read = self.tokens.cache_read.saturating_add(tokens.cache_read);
                self.tokens.cache_write =
                    self.tokens.cache_write.saturating_add(tokens.cache_write);
                self.cost += cost;
                self.last_finish_reason = reason;
                if !self.errors.is_empty() {
                    self.finished_after_error = true;
                }
            }
            Event::Error(err) => {
                if err.name == "ContextOverflowError" {
                    self.overflows += 1;
                }
                self.finished_after_error = false;
                self.errors.push(err);
            }
            Event::Unknown { kind } => {
                self.unknown += 1;
                if self.unknown_types.len() < 20 && !self.unknown_types.contains(&kind) {
                    self.unknown_types.push(kind);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"type":"step_start","timestamp":1795987894648,"sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","part":{"id":"prt_229387128001ee7XDgttLwT9qO","messageID":"msg_229386e810015j1NoE4gjBjvD6","sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","type":"step-start"}}
{"type":"text","timestamp":1795987894648,"sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","part":{"id":"prt_22938712d0013t39dQOusCuf5Q","messageID":"msg_229386e810015j1NoE4gjBjvD6","sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","type":"text","text":"Hello from the fake. DONE","time":{"start":1795987894573,"end":1795987894581}}}
{"type":"step_finish","timestamp":1795987894648,"sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","part":{"id":"prt_22938713e001AlUlRVB5wMKRUd","reason":"stop","messageID":"msg_229386e810015j1NoE4gjBjvD6","sessionID":"ses_dd6c79b73ffeIE4YH7L0iDzO0Q","type":"step-finish","tokens":{"total":13,"input":8,"output":3,"reasoning":0,"cache":{"write":0,"read":2}},"cost":0}}"#;

    fn fold(lines: &str) -> RunSummary {
        let mut s = RunSummary::new(1 << 20);
        for l in lines.lines() {
            s.push_line(l);
        }
        s
    }

    #[test]
    fn token_totals_saturate_instead_of_overflowing() {
        // Found by the event_lines fuzz target: two steps with huge token counts overflowed
        // the sums (a panic in debug builds, a wrapped total in release).
        let huge = r#"{"type":"step_finish","sessionID":"ses_x","part":{"type":"step-finish","reason":"stop","tokens":{"input":18446744073709551615,"output":18446744073709551615,"reasoning":18446744073709551615,"cache":{"write":18446744073709551615,"read":18446744073709551615}},"cost":0}}"#;
        let s = fold(&format!("{huge}\n{huge}"));
        assert_eq!(s.tokens.input, u64::MAX);
        assert_eq!(s.tokens.output, u64::MAX);
        assert_eq!(s.tokens.cache_read, u64::MAX);
    }

    #[test]
    fn ok_run_gives_session_text_and_tokens() {
        let s = fold(OK);
        assert_eq!(
            s.session_id.as_deref(),
            Some("ses_dd6c79b73ffeIE4YH7L0iDzO0Q")
        );
        assert_eq!(s.final_text, "Hello from the fake. DONE");
        assert_eq!(s.steps, 1);
        assert_eq!(
            s.tokens,
            TokenUsage {
                input: 8,
                output: 3,
                reasoning: 0,
                cache_read: 2,
                cache_write: 0
            }
        );
        assert_eq!(s.last_finish_reason.as_deref(), Some("stop"));
        assert!(s.errors.is_empty());
        assert!(s.produced_output);
        assert_eq!(s.malformed, 0);
    }

    #[test]
    fn tool_call_and_rejected_permission_are_recognised() {
        let line = r#"{"type":"tool_use","timestamp":1795987936729,"sessionID":"ses_x","part":{"type":"tool","tool":"read","callID":"call_abc123","state":{"status":"error","input":{"filePath":"/nonexistent/file.txt"},"error":"The user rejected permission to use this specific tool call.","time":{"start":1,"end":2}},"id":"prt_1","sessionID":"ses_x","messageID":"msg_1"}}"#;
        let s = fold(line);
        assert_eq!(s.tool_calls.len(), 1);
        assert_eq!(s.tool_calls[0].tool, "read");
        assert!(s.tool_calls[0].permission_rejected());
        let bash = r#"{"type":"tool_use","timestamp":1,"sessionID":"ses_x","part":{"type":"tool","tool":"bash","callID":"c","state":{"status":"completed","input":{"command":"echo hi"},"output":"hi\n","title":"echo hi","time":{"start":1,"end":2}},"id":"p","sessionID":"ses_x","messageID":"m"}}"#;
        let s = fold(bash);
        assert_eq!(s.tool_calls[0].title.as_deref(), Some("echo hi"));
        assert!(!s.tool_calls[0].permission_rejected());
    }

    #[test]
    fn api_error_fields_are_flattened() {
        let line = r#"{"type":"error","timestamp":1795988217684,"sessionID":"ses_dd6c2b6d0ffeSk14Avuy6dSi6X","error":{"name":"APIError","data":{"message":"Rate limit reached for requests","statusCode":429,"isRetryable":true,"responseHeaders":{"retry-after-ms":"50"},"responseBody":"{\"error\": {\"message\": \"Rate limit reached for requests\", \"type\": \"requests\", \"code\": \"rate_limit_exceeded\"}}","metadata":{"url":"http://127.0.0.1:18556/v1/chat/completions"}}}}"#;
        let s = fold(line);
        let e = &s.errors[0];
        assert_eq!(e.name, "APIError");
        assert_eq!(e.status_code, Some(429));
        assert_eq!(e.is_retryable, Some(true));
        assert!(
            e.response_body
                .as_deref()
                .unwrap()
                .contains("rate_limit_exceeded")
        );
        assert!(!s.produced_output);
    }

    #[test]
    fn recovery_after_overflow_is_noticed() {
        let lines = r#"{"type":"error","timestamp":1,"sessionID":"ses_a","error":{"name":"ContextOverflowError","data":{"message":"This model's maximum context length is 128000 tokens."}}}
{"type":"step_start","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_c","type":"step-start"}}
{"type":"text","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_c","type":"text","text":"Fake title"}}
{"type":"step_finish","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_c","reason":"stop","type":"step-finish","tokens":{"input":5,"output":2},"cost":0}}
{"type":"text","timestamp":2,"sessionID":"ses_a","part":{"messageID":"msg_d","type":"text","synthetic":true,"metadata":{"compaction_continue":true},"text":"The previous request exceeded"}}
{"type":"step_start","timestamp":3,"sessionID":"ses_a","part":{"messageID":"msg_e","type":"step-start"}}
{"type":"text","timestamp":3,"sessionID":"ses_a","part":{"messageID":"msg_e","type":"text","text":"Hello from the fake. DONE"}}
{"type":"step_finish","timestamp":3,"sessionID":"ses_a","part":{"messageID":"msg_e","reason":"stop","type":"step-finish","tokens":{"input":8,"output":3,"cache":{"read":2}},"cost":0.5}}"#;
        let s = fold(lines);
        assert_eq!(s.overflows, 1);
        assert!(s.finished_after_error);
        assert_eq!(s.final_text, "Hello from the fake. DONE");
        assert!(
            !s.text
                .to_string_lossy()
                .contains("previous request exceeded")
        );
        assert_eq!(s.tokens.input, 13);
        assert!((s.cost - 0.5).abs() < 1e-9);
    }

    #[test]
    fn unknown_and_malformed_lines_are_counted_not_fatal() {
        let lines = "not json\n{\"type\":\"done\",\"sessionID\":\"ses_q\"}\n[1,2]\n\n{\"type\":\"text\",\"part\":{\"text\":\"x\",\"messageID\":\"m\"}}";
        let s = fold(lines);
        assert_eq!(s.malformed, 2);
        assert_eq!(s.unknown, 1);
        assert_eq!(s.unknown_types, vec!["done".to_owned()]);
        assert_eq!(s.session_id.as_deref(), Some("ses_q"));
        assert_eq!(s.final_text, "x");
    }

    #[test]
    fn several_text_parts_of_the_last_message_make_the_final_text() {
        let lines = r#"{"type":"text","sessionID":"s","part":{"messageID":"m1","text":"first"}}
{"type":"text","sessionID":"s","part":{"messageID":"m2","text":"second"}}
{"type":"text","sessionID":"s","part":{"messageID":"m2","text":"third"}}"#;
        let s = fold(lines);
        assert_eq!(s.final_text, "second\n\nthird");
        assert_eq!(s.text.to_string_lossy(), "first\n\nsecond\n\nthird");
    }
}
