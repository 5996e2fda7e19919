//! Checking an agent's work mechanically (issue 34): the caller's verify command and output
//! schema. This module is the pure part: the outcome of a verify run and its line, the
//! follow-up prompts the agent gets when a check fails, and the output schema (compiled at
//! the start, an answer checked against it). Running the command is the supervisor's
//! (`supervisor/verify.rs`), in the run's fence and world.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most follow-ups a failed verify may get (`verify_retries`).
pub const MAX_VERIFY_RETRIES: u32 = 3;
/// The largest output schema accepted, in bytes of its JSON text.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Characters of a verify command's output kept (its end), shown and quoted to the agent.
pub const VERIFY_TAIL_CHARS: usize = 4_000;
/// Validation errors of an answer quoted to the agent and in the failure.
const SCHEMA_ERRORS_SHOWN: usize = 8;

/// How the last verify run of a task ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyOutcome {
    /// Exit status 0.
    pub passed: bool,
    /// Its exit code (`None`: killed by a signal).
    pub exit: Option<i32>,
    /// The signal that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// How many times the command ran (the first after the agent's turn, one more after each
    /// follow-up).
    pub runs: u32,
}

impl VerifyOutcome {
    /// `passed`, `failed (exit 1)`, `failed (signal 9)`, with `after N runs` past the first.
    pub fn line(&self) -> String {
        let mut s = if self.passed {
            "passed".to_owned()
        } else {
            match (self.exit, self.signal) {
                (Some(c), _) => format!("failed (exit {c})"),
                (None, Some(sig)) => format!("failed (signal {sig})"),
                (None, None) => "failed".to_owned(),
            }
        };
        if self.runs > 1 {
            s.push_str(&format!(" after {} runs", self.runs));
        }
        s
    }
}

/// The end of a verify command's output as it is kept and shown: ANSI colours removed,
/// secrets redacted (the policy's guard), at most [`VERIFY_TAIL_CHARS`] characters.
pub fn output_tail(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let clean = crate::classify::strip_ansi(&text);
    let redacted = bridge_policy::secrets::redact(clean.trim_end());
    let n = redacted.chars().count();
    if n <= VERIFY_TAIL_CHARS {
        return redacted;
    }
    let tail: String = redacted.chars().skip(n - VERIFY_TAIL_CHARS).collect();
    format!("[… {} characters cut]\n{tail}", n - VERIFY_TAIL_CHARS)
}

/// The follow-up an agent gets when the verify command failed after its turn.
pub fn verify_follow_up(command: &str, outcome: &VerifyOutcome, tail: &str) -> String {
    format!(
        "The check for this task failed after your turn: `{command}` {}. The end of its output:\n\n```\n{tail}\n```\n\nFix what it reports, staying within the task, then end your turn; the check runs again.",
        outcome.line()
    )
}

/// A caller's output schema, checked at the start: at most [`MAX_SCHEMA_BYTES`], an object,
/// and one the `jsonschema` crate compiles. The error is one line.
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    let bytes = serde_json::to_string(schema).map(|s| s.len()).unwrap_or(0);
    if bytes > MAX_SCHEMA_BYTES {
        return Err(format!(
            "output_schema is {bytes} bytes, over the limit of {MAX_SCHEMA_BYTES}: give a smaller schema"
        ));
    }
    if !schema.is_object() {
        return Err("output_schema must be a JSON Schema object: give one such as {\"type\": \"object\", \"properties\": {…}}".to_owned());
    }
    jsonschema::validator_for(schema).map_err(|e| {
        let why: String = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let why: String = why.chars().take(300).collect();
        format!("output_schema does not compile as a JSON Schema ({why}): fix it")
    })
}

/// What the prompt adds when the answer must follow a schema.
pub fn schema_instruction(schema: &Value) -> String {
    format!(
        "\n\nYour final answer must be only a JSON value, valid against this JSON Schema (no prose, no code fence around it):\n{}\n",
        serde_json::to_string(schema).unwrap_or_default()
    )
}

/// An answer checked against the schema: the parsed value, or the errors (one line each, at
/// most a few).
pub fn check_answer(validator: &jsonschema::Validator, answer: &str) -> Result<Value, Vec<String>> {
    let value = parse_answer(answer).map_err(|e| vec![e])?;
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .take(SCHEMA_ERRORS_SHOWN)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() {
                "(the answer)".to_owned()
            } else {
                at
            };
            format!("at {at}: {e}")
        })
        .collect();
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// The answer as JSON: the whole text, or the one fenced block in it (models like fences).
fn parse_answer(answer: &str) -> Result<Value, String> {
    let t = answer.trim();
    if let Ok(v) = serde_json::from_str(t) {
        return Ok(v);
    }
    let fenced = t
        .split_once("```")
        .and_then(|(_, rest)| rest.rsplit_once("```"))
        .map(|(inner, _)| inner.trim_start_matches("json").trim());
    match fenced.map(serde_json::from_str::<Value>) {
        Some(Ok(v)) => Ok(v),
        _ => Err(match serde_json::from_str::<Value>(t) {
            Err(e) => format!("the answer is not JSON ({e})"),
            Ok(_) => "the answer is not JSON".to_owned(),
        }),
    }
}

/// The follow-up an agent gets when its answer did not satisfy the schema.
pub fn schema_follow_up(errors: &[String]) -> String {
    format!(
        "Your final answer does not satisfy the required JSON Schema:\n{}\n\nAnswer again with only the corrected JSON value.",
        errors
            .iter()
            .map(|e| format!("- {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_are_checked_against_the_schema_and_errors_say_where() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let v = compile_schema(&schema).unwrap();
        assert_eq!(check_answer(&v, " {\"n\": 3}\n").unwrap(), json!({"n": 3}));
        assert_eq!(
            check_answer(&v, "Here:\n```json\n{\"n\": 4}\n```").unwrap(),
            json!({"n": 4})
        );
        let e = check_answer(&v, "{\"n\": \"x\"}").unwrap_err();
        assert!(e[0].starts_with("at /n: "), "{e:?}");
        let e = check_answer(&v, "Script finished. DONE").unwrap_err();
        assert!(e[0].starts_with("the answer is not JSON"), "{e:?}");
    }

    #[test]
    fn schemas_too_large_or_broken_are_refused_in_one_line() {
        let big = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        let e = compile_schema(&big).unwrap_err();
        assert!(e.contains("over the limit of 65536"), "{e}");
        let e = compile_schema(&json!({"type": "no-such-type"})).unwrap_err();
        assert!(e.starts_with("output_schema does not compile"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(compile_schema(&json!("string")).is_err());
    }

    #[test]
    fn a_verify_line_names_the_exit_and_the_runs() {
        let mut o = VerifyOutcome {
            passed: false,
            exit: Some(2),
            signal: None,
            runs: 1,
        };
        assert_eq!(o.line(), "failed (exit 2)");
        o.runs = 2;
        assert_eq!(o.line(), "failed (exit 2) after 2 runs");
        let tail =
            output_tail(b"\x1b[31mFAIL\x1b[0m token=ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi\n");
        assert!(tail.starts_with("FAIL"), "{tail}");
        assert!(
            !tail.contains("ghp_4Fq9ZtL2mXc7RbN1sV8kD3wJ0yHa6PeU5gTi"),
            "{tail}"
        );
    }
}
